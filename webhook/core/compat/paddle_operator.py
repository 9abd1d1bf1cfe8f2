"""PaddleFlow's paddle-operator, as its PaddleJob pods read it (controllers/paddlejob_helper.go):

* on every pod, ps and worker alike: `PADDLE_TRAINER_ID` (the pod's index in its role),
  `TRAINING_ROLE` and `PADDLE_TRAINING_ROLE` (`PSERVER`, `TRAINER`, `HETER`; collective pods are
  trainers too);
* from its ConfigMap: `TRAINER_PORTS_NUM` (20, which Paddle's older launcher checks in
  `cloud_utils.use_paddlecloud()`), `PADDLE_TRAINERS` (the workers' hosts without ports) and,
  in parameter-server mode, the Gloo rendezvous `PADDLE_WITH_GLOO`, `PADDLE_GLOO_RENDEZVOUS=3`
  (HTTP) and `PADDLE_GLOO_HTTP_ENDPOINT` (the first server, on its port + 18: the operator's
  PADDLE_PORT + HOST_PORT_NUM - 2).

The endpoint lists, `POD_IP` and `PADDLE_PORT` are the paddle framework's: every pod and list
names pods by their DNS names, as the operator's `intranet: Service` does. Its default
`intranet: PodIP` writes pod IPs, which no pod has yet when the webhook admits it; Paddle only
needs `POD_IP` to match the pod's entry in the lists, which the names do.
"""

from __future__ import annotations

from functools import lru_cache

from webhook.core.compat.base import Compat
from webhook.core.frameworks import paddle
from webhook.core.frameworks.base import Framework, Placement
from webhook.core.shape.topology import Topology

TRAINER_PORTS_NUM = 20  # the operator's HOST_PORT_NUM: ports each pod may use from its port on
GLOO_HTTP_PORT_OFFSET = TRAINER_PORTS_NUM - 2
GLOO_RENDEZVOUS_HTTP = "3"
WITH_GLOO = "1"  # the withGloo every PaddleJob example of the operator sets


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    return {"PADDLE_TRAINERS": ",".join(topology.hosts("worker"))}


def env(framework: Framework, placement: Placement) -> dict[str, str]:
    topology = placement.topology
    training_role = paddle.TRAINING_ROLES[placement.role]
    result = {
        "PADDLE_TRAINER_ID": str(placement.index),
        "TRAINING_ROLE": training_role,
        "PADDLE_TRAINING_ROLE": training_role,
        "TRAINER_PORTS_NUM": str(TRAINER_PORTS_NUM),
    }
    if topology.has("worker"):
        result |= placement.listed("PADDLE_TRAINERS", lists)
    server = next((role for role in paddle.SERVER_ROLES if topology.has(role)), None)
    if server is not None:
        port = placement.port_of(server)
        endpoint = topology.host(server, 0)
        if port is not None:
            endpoint += f":{port + GLOO_HTTP_PORT_OFFSET}"
        result |= {
            "PADDLE_WITH_GLOO": WITH_GLOO,
            "PADDLE_GLOO_RENDEZVOUS": GLOO_RENDEZVOUS_HTTP,
            "PADDLE_GLOO_HTTP_ENDPOINT": endpoint,
        }
    return result


COMPAT = Compat(
    name="paddle-operator",
    env=env,
    frameworks=(paddle.FRAMEWORK.name,),
    lists=lists,
    key_vars=("TRAINER_PORTS_NUM",),
)

"""trainhook.io/ssh-keys: a job of any framework that asks gets the job's SSH Secret, made by the
sweeper and mounted by the webhook, as an MPI job does (Volcano's ssh plugin on any job)."""

from __future__ import annotations

import base64

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.render import expand
from webhook.kube.resources import PODS, SECRETS, STATEFULSETS


def test_a_generic_job_that_asks_for_ssh_keys_gets_its_secret_made_and_mounted(emulator, kube):
    (workers,) = stamped(
        statefulset(
            "mindspore-cpu-pod",
            framework="generic",
            role="pod",
            job="mindspore-cpu",
            replicas=2,
            annotations={contract.SSH_KEYS: "true"},
        )
    )
    # The webhook copies the job-wide setting onto the template, where the pods read it.
    workers["spec"]["template"]["metadata"]["annotations"][contract.SSH_KEYS] = "true"
    workers = kube.create(STATEFULSETS, "ml", workers)
    admitted = mutate_pod(expand(workers, "ml")[1], "ml").pod["spec"]
    volume = {
        "name": "mpi-ssh",
        "secret": {"secretName": "mindspore-cpu-ssh", "defaultMode": 0o600},
    }
    assert volume in admitted["volumes"]
    mount = {"name": "mpi-ssh", "mountPath": "/root/.ssh", "readOnly": True}
    assert mount in admitted["containers"][0]["volumeMounts"]
    assert admitted["schedulingGates"] == [{"name": contract.WAITING_FOR_OWNED_OBJECTS}]
    waiting = pod(workers, 1, phase="Pending", ready=False)
    waiting["spec"]["volumes"] = admitted["volumes"]
    waiting["spec"]["schedulingGates"] = admitted["schedulingGates"]
    kube.create(PODS, "ml", waiting)
    with sweeping(kube):
        eventually(
            lambda: (
                [s["metadata"]["name"] for s in emulator.objects(SECRETS, "ml")]
                == ["mindspore-cpu-ssh"]
            ),
            what="the job's SSH Secret",
        )
        (secret,) = emulator.objects(SECRETS, "ml")
        files = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        assert {"id_rsa", "id_rsa.pub", "authorized_keys", "config"} <= set(files)
        # Volcano's ssh plugin's pods serve SSH on its port, 22.
        assert "Host *.mindspore-cpu.ml.svc *.mindspore-cpu.ml.svc.*" in files["config"]
        assert "Port 22" in files["config"]
        eventually(
            lambda: not emulator.objects(PODS, "ml")[0]["spec"].get("schedulingGates"),
            what="the pod let start once the Secret is the job's own",
        )

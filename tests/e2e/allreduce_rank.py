"""One training process: join the process group from the environment, all-reduce, report.

Run as a pod's command (`python allreduce_rank.py RESULTS_DIR`, or under torchrun). Writes
`RESULTS_DIR/<hostname>-<rank>.json` with what torch itself sees and what the environment said.
"""

import datetime
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist

RENDEZVOUS_TIMEOUT = datetime.timedelta(seconds=60)
# docs/contract.md's line for a script of a large job: every list from its file into the env.
LISTS = (
    "import os; os.environ.update({k[:-5]: open(v).read() for k, v in list(os.environ.items()) "
    'if k.endswith("_FILE") and v.startswith("/etc/trainhook/")})'
)


def main(results: Path) -> None:
    exec(LISTS, {})
    hosts = {name: value for name, value in os.environ.items() if name.endswith("_HOSTS")}
    seen_env = {
        name: os.environ.get(name)
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    dist.init_process_group("gloo", init_method="env://", timeout=RENDEZVOUS_TIMEOUT)
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    value = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(gathered, torch.tensor([rank], dtype=torch.int64))
    dist.barrier()
    dist.destroy_process_group()
    report = {
        "hostname": socket.gethostname(),
        "rank": rank,
        "world_size": world_size,
        "sum": int(value.item()),
        "gathered": [int(tensor.item()) for tensor in gathered],
        "env": seen_env,
        "hosts": hosts,
    }
    (results / f"{report['hostname']}-{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

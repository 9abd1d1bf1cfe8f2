"""One JAX process: jax.distributed.initialize from the env, then an allgather across processes.

Writes RESULTS/<process id>.json with what JAX computed.
"""

import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils


def main(results: Path) -> None:
    jax.distributed.initialize(
        coordinator_address=f"{os.environ['COORDINATOR_ADDRESS']}:{os.environ['COORDINATOR_PORT']}",
        num_processes=int(os.environ["NUM_PROCESSES"]),
        process_id=int(os.environ["PROCESS_ID"]),
    )
    index = jax.process_index()
    gathered = multihost_utils.process_allgather(jnp.array([index * 10 + 1]))
    report = {
        "process_index": index,
        "process_count": jax.process_count(),
        "gathered": [int(value) for value in gathered.reshape(-1)],
    }
    (results / f"{index}.json").write_text(json.dumps(report))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

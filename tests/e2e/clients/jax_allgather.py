"""One JAX process: jax.distributed.initialize from the env, then an allgather across processes.

Writes RESULTS/<process id>.json with what JAX computed, and whether JAX formed the job from the
env by itself (a call without arguments) or needed the process count and id passed. With
`--kubeflow`, it joins as the training-operator's JAXJob example image does: every argument from
the variables that operator sets (COORDINATOR_ADDRESS and _PORT, NUM_PROCESSES, PROCESS_ID).
"""

import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils


def initialize() -> bool:
    """Join the job; True when a bare initialize() sufficed."""
    try:
        jax.distributed.initialize()
    except ValueError as error:
        # JAX reads JAX_COORDINATOR_ADDRESS itself, but takes the process count and id only
        # from a cluster it detects (Slurm, Open MPI, Cloud TPU, an Indexed Job via the API).
        if str(error) != "Number of processes must be defined.":
            raise
        jax.distributed.initialize(
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
        )
        return False
    return True


def initialize_as_kubeflow() -> bool:
    coordinator = f"{os.environ['COORDINATOR_ADDRESS']}:{os.environ['COORDINATOR_PORT']}"
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=int(os.environ["NUM_PROCESSES"]),
        process_id=int(os.environ["PROCESS_ID"]),
    )
    return False


def main(results: Path, kubeflow: bool) -> None:
    bare = initialize_as_kubeflow() if kubeflow else initialize()
    index = jax.process_index()
    gathered = multihost_utils.process_allgather(jnp.array([index * 10 + 1]))
    report = {
        "bare": bare,
        "process_index": index,
        "process_count": jax.process_count(),
        "gathered": [int(value) for value in gathered.reshape(-1)],
    }
    (results / f"{index}.json").write_text(json.dumps(report))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--kubeflow" in sys.argv[2:])

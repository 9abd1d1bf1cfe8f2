"""One XGBoost pod: rank 0 also runs the tracker; every pod joins and all-reduces.

Writes RESULTS/<rank>.json with the rank XGBoost assigned and the all-reduced sum.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
from xgboost import collective
from xgboost.tracker import RabitTracker


def main(results: Path) -> None:
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    tracker = None
    if rank == 0:
        # sortby="task" makes the tracker give each worker the rank it passes as its task id
        tracker = RabitTracker(n_workers=world_size, host_ip=host, port=port, sortby="task")
        tracker.start()
    with collective.CommunicatorContext(
        dmlc_tracker_uri=host, dmlc_tracker_port=port, dmlc_task_id=str(rank)
    ):
        assigned = collective.get_rank()
        total = collective.allreduce(np.array([assigned + 1], dtype=np.int64), collective.Op.SUM)
        report = {
            "rank": assigned,
            "world_size": collective.get_world_size(),
            "sum": int(total[0]),
        }
    if tracker is not None:
        tracker.wait_for()
    (results / f"{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

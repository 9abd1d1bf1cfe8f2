"""One MindSpore process: init() from the MS_* env, then an AllReduce across the workers.

The scheduler runs the same script (MS_ROLE=MS_SCHED), as MindSpore's dynamic networking
expects; workers write RESULTS/<rank>.json with what MindSpore computed.
"""

import json
import os
import socket
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore.communication import get_group_size, get_rank, init


def main(results: Path) -> None:
    ms.set_device("CPU")
    init()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return
    rank, size = get_rank(), get_group_size()
    total = ops.AllReduce()(Tensor(np.array([rank + 1], dtype=np.float32)))
    report = {
        "rank": rank,
        "size": size,
        "sum": int(total.asnumpy()[0]),
        "host": socket.gethostname(),
        "node_id": os.environ.get("MS_NODE_ID"),
    }
    (results / f"{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""One Paddle trainer process (started by paddle.distributed.launch): all-reduce its rank.

Writes RESULTS/<rank>.json with what Paddle computed.
"""

import json
import sys
from pathlib import Path

import paddle
import paddle.distributed as dist


def main(results: Path) -> None:
    dist.init_parallel_env()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    value = paddle.to_tensor([rank + 1], dtype="int64")
    dist.all_reduce(value)
    gathered: list[paddle.Tensor] = []
    dist.all_gather(gathered, paddle.to_tensor([rank], dtype="int64"))
    report = {
        "rank": rank,
        "world_size": world_size,
        "sum": int(value.numpy()[0]),
        "gathered": [int(tensor.numpy()[0]) for tensor in gathered],
    }
    (results / f"{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

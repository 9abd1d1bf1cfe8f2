"""One TensorFlow task: MultiWorkerMirroredStrategy from TF_CONFIG, then an all-reduce.

Writes RESULTS/<task type>-<index>.json with what TensorFlow computed.
"""

import json
import sys
from pathlib import Path

import tensorflow as tf


def main(results: Path) -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    # chief -> 1, worker i -> i + 2: the sum proves every task took part exactly once
    mine = 1 if resolver.task_type == "chief" else resolver.task_id + 2
    per_replica = strategy.run(lambda: tf.constant(mine, dtype=tf.int64))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    report = {
        "task": [resolver.task_type, resolver.task_id],
        "cluster": resolver.cluster_spec().as_dict(),
        "replicas": strategy.num_replicas_in_sync,
        "sum": int(total.numpy()),
    }
    name = f"{resolver.task_type}-{resolver.task_id}.json"
    (results / name).write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

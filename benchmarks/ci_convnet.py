"""A small convnet for the CI validation study (benchmarks/ci_capture.py runs it, one
capture per process): the model of issue 24's same-config false alarms on BatchNorm scopes.

Four layers `conv0`..`conv3` of 3x3 NHWC conv -> primitive BatchNorm (`convN/BatchNorm`,
tf.nn.moments and its arithmetic) -> relu -> 2x2 max pool (fixtures/tf_blocks._conv), 16,
32, 32, 64 filters on 32 random 32x32 RGB images, a dense `logits` layer, sparse softmax
cross-entropy, GradientDescent (`train/...`). With `--wide-conv N`, layer N has WIDE_FACTOR
times the filters: its scope (and the next layer's input channels) does more work.

    python benchmarks/ci_convnet.py --out DIR --steps 30 [--wide-conv 1]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "fixtures"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, SIZE, CLASSES = 32, 32, 10
FILTERS = (16, 32, 32, 64)
WIDE_FACTOR = 4


def capture_convnet(out: Path, steps: int, wide: int | None = None, warmup: int = 2) -> None:
    """Train the convnet for `steps` traced steps after `warmup` untraced ones."""
    from tf_blocks import _capture, _conv, _dense, _inputs, _seed, _sparse_softmax_loss, _train_op

    with tf.Graph().as_default():
        rng = _seed()
        data_x = rng.rand(4 * BATCH, SIZE, SIZE, 3).astype(np.float32)
        data_y = rng.randint(0, CLASSES, size=4 * BATCH).astype(np.int64)
        h, y, data = _inputs(data_x, data_y, BATCH, ("images", "labels"))
        for i, filters in enumerate(FILTERS):
            h = _conv(h, filters * (WIDE_FACTOR if i == wide else 1), f"conv{i}")
        with tf.compat.v1.name_scope("flatten"):
            h = tf.reshape(h, [BATCH, -1])
        logits = _dense(h, CLASSES, "logits", activation=None)
        loss = _sparse_softmax_loss(logits, y)
        losses = _capture(out, _train_op(loss, 0.01), data, runs=steps + 1, lean=True,
                          warmup=warmup, finite_loss=loss)
        print(f"{out.name}: loss {losses[0]:.4g} -> {losses[-1]:.4g}", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--wide-conv", type=int, default=None,
                    help=f"this layer has {WIDE_FACTOR}x the filters")
    ap.add_argument("--warmup", type=int, default=2, help="untraced steps first")
    args = ap.parse_args(argv)
    tf.compat.v1.disable_eager_execution()
    tf.get_logger().setLevel("ERROR")
    import generate

    capture_convnet(args.out, args.steps, args.wide_conv, args.warmup)
    generate.drop_partition_graphs(args.out)
    print(f"{args.out} steps={len(generate._step_files(args.out))} "
          f"bytes={generate._tree_bytes(args.out)}", flush=True)


if __name__ == "__main__":
    main()

"""A small training program driven by the capture tests in a subprocess.

usage: python tests/capture_train.py OUT_DIR --steps N --save-steps K [--forever]
                                     [--fsize-limit BYTES] [--tf-logs]
Prints "TRAINED <steps>" when training finished.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--save-steps", type=int, default=1)
    ap.add_argument("--forever", action="store_true")
    ap.add_argument("--fsize-limit", type=int, default=0)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--tf-logs", action="store_true", help="CaptureHook(quiet_tf_logs=False)")
    args = ap.parse_args()
    if args.fsize_limit:
        # A real "disk full": writes past the limit fail with EFBIG (Python ignores SIGXFSZ).
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize_limit, args.fsize_limit))

    import tensorflow as tf

    from runlens.analyzer.capture.tf1 import CaptureHook

    tf.compat.v1.disable_eager_execution()
    with tf.Graph().as_default():
        x = tf.random.normal([32, args.width])
        h = x
        for i in range(4):
            with tf.compat.v1.variable_scope(f"dense{i}"):
                w = tf.compat.v1.get_variable("w", [args.width, args.width])
                h = tf.nn.relu(tf.matmul(h, w))
        loss = tf.reduce_mean(h**2)
        step = tf.compat.v1.train.get_or_create_global_step()
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
        hook = CaptureHook(save_steps=args.save_steps, output_dir=args.out,
                           quiet_tf_logs=not args.tf_logs)
        done = 0
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
            while args.forever or done < args.steps:
                sess.run(train)
                done += 1
    print(f"TRAINED {done}", flush=True)


if __name__ == "__main__":
    main()

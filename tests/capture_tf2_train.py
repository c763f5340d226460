"""A TF2 training script the capture_tf2 tests run in a fresh process (the profiler and
eager mode are process-wide; TF1 tests turn eager off).

    python tests/capture_tf2_train.py loop|keras LOGDIR FIRST LAST STEPS

Prints "trained N" after the last step: training went on whatever capturing did.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from runlens.analyzer.capture.tf2 import ProfileCallback, profile  # noqa: E402


def loop(logdir: str, first: int, last: int, steps: int) -> int:
    w = tf.Variable(tf.ones((8, 4)), name="w")
    x = tf.ones((16, 8))

    @tf.function
    def train_step():
        with tf.name_scope("layer"):
            loss = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)))
        w.assign_sub(0.01 * tf.ones_like(w))
        return loss

    done = 0
    with profile(logdir, steps=(first, last)) as prof:
        for step in range(steps):
            with prof.step(step):
                train_step().numpy()
            done += 1
    return done


def keras(logdir: str, first: int, last: int, steps: int) -> int:
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((steps * 4, 8), "float32"), np.ones((steps * 4, 4), "float32")
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0,
                        callbacks=[ProfileCallback(logdir, batches=(first, last))])
    return steps if history.history["loss"] else 0


if __name__ == "__main__":
    mode, logdir, first, last, steps = sys.argv[1:6]
    fn = loop if mode == "loop" else keras
    print("trained", fn(logdir, int(first), int(last), int(steps)), flush=True)

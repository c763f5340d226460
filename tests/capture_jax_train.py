"""A small JAX training loop profiled by analyzer.capture.jax (run by
tests/test_capture_jax.py in its own process: the profiler is process-wide).

    python tests/capture_jax_train.py MODE LOGDIR FIRST LAST STEPS
MODE: loop (profile + prof.step), decorator (@profiled), busy (a trace is already running:
the helper must warn and let training go on), raising (the step raises inside a profiled
step: the error passes through, the trace is still written).
"""

from __future__ import annotations

import logging
import sys

import jax
import jax.numpy as jnp

from runlens.analyzer.capture.jax import profile, profiled

logging.basicConfig(level=logging.WARNING)


def main(mode: str, logdir: str, first: int, last: int, steps: int) -> None:
    def loss_fn(w, x):
        with jax.named_scope("mlp"):
            h = jnp.tanh(x @ w["w1"])
        with jax.named_scope("head"):
            return jnp.mean((h @ w["w2"]) ** 2)

    @jax.jit
    def train_step(w, x):
        loss, g = jax.value_and_grad(loss_fn)(w, x)
        with jax.named_scope("sgd"):
            return jax.tree_util.tree_map(lambda p, d: p - 0.01 * d, w, g), loss

    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    w = {"w1": jax.random.normal(k1, (128, 256)), "w2": jax.random.normal(k2, (256, 8))}
    x = jax.random.normal(k3, (64, 128))
    done = 0
    if mode == "loop":
        with profile(logdir, steps=(first, last)) as prof:
            for i in range(steps):
                with prof.step(i) as s:
                    w, loss = s.keep(train_step(w, x))
                done += 1
    elif mode in ("decorator", "busy"):
        if mode == "busy":
            jax.profiler.start_trace(logdir + "-other")
        step = profiled(logdir, steps=(first, last))(train_step)
        for _ in range(steps):
            w, loss = step(w, x)
            done += 1
        if mode == "busy":
            jax.profiler.stop_trace()
    elif mode == "raising":
        try:
            with profile(logdir, steps=(first, last)) as prof:
                for i in range(steps):
                    with prof.step(i) as s:
                        w, loss = s.keep(train_step(w, x))
                        if i == first:
                            raise KeyError("user error")
                    done += 1
        except KeyError as e:
            print(f"raised {e}")
    print(f"trained {done} loss {float(loss):.4f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))

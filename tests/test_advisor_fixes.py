"""Every TensorFlow API the advisor names in a fix exists in the TensorFlow we support
(the dev extra's), and the batch-norm fix really builds the fused kernel."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from runlens import checkers
from runlens.analyzer.load import load_run
from runlens.checkers.base import REGISTRY
from tests.conftest import FIXTURES

tf = pytest.importorskip("tensorflow")

API = re.compile(r"\btf\.[A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_]")
# Names in the prose that are not APIs.
NOT_API = {"tf.timeline"}  # the trace format of tensorflow/python/client/timeline.py


def _resolve(name: str) -> object:
    obj: object = tf
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _advisor_texts() -> dict[str, str]:
    """Where fixes are written: each checker's docstring (`advise --list`, docs), and the
    suggestion of every finding on every fixture."""
    texts = {f"{code} docstring": inspect.cleandoc(cls.__doc__ or "")
             for code, cls in REGISTRY.items()}
    for run_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for f in checkers.run_checks(load_run(run_dir)):
            texts[f"{f.code} on {run_dir.name}"] = f.suggestion
    doc = FIXTURES.parents[1] / "docs" / "advisor.md"
    texts["docs/advisor.md"] = doc.read_text()
    return texts


def test_every_api_named_in_a_fix_exists_in_our_tensorflow():
    named: dict[str, str] = {}
    for where, text in _advisor_texts().items():
        for name in API.findall(text):
            named.setdefault(name, where)
    assert "tf.compat.v1.nn.fused_batch_norm" in named and "tf.data.AUTOTUNE" in named
    missing = []
    for name, where in sorted(named.items()):
        if name in NOT_API:
            continue
        try:
            _resolve(name)
        except AttributeError:
            missing.append(f"{name} ({where})")
    assert not missing, f"TensorFlow {tf.__version__} has no: {', '.join(missing)}"


def test_no_fix_names_an_api_that_fails_under_keras_3():
    """tf.compat.v1.layers.batch_normalization resolves but raises under Keras 3."""
    keras = importlib.import_module("keras")
    assert int(keras.__version__.split(".")[0]) >= 3
    with pytest.raises(AttributeError, match="Keras 3"):
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.float32, [2, 4, 4, 3])
            tf.compat.v1.layers.batch_normalization(x, fused=True, training=True)
    for where, text in _advisor_texts().items():
        assert "layers.batch_normalization(" not in text.replace(
            "`tf.compat.v1.layers.batch_normalization` fails", ""), where


def test_the_batch_norm_fix_builds_the_fused_kernel_keras_3_does_not():
    spec = tf.TensorSpec([2, 4, 4, 3])

    def fused(x):
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]),
                                                   is_training=True)
        return y

    layer = tf.keras.layers.BatchNormalization()

    def keras3(x):
        return layer(x, training=True)

    def op_types(fn):
        graph = tf.function(fn, autograph=False).get_concrete_function(spec).graph
        return {op.type for op in graph.get_operations()}

    assert "FusedBatchNormV3" in op_types(fused)
    assert not any("FusedBatchNorm" in t for t in op_types(keras3))  # why the fix says so

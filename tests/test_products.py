"""Derived results are products (analyzer/products.py): loading computes none and never
imports the views, a Run never changes once loaded, and a product is cached for the next
process under a key that follows its code, every worker's inputs and the chosen steps."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from runlens import checkers
from runlens.analyzer import cache, productcache, products
from runlens.analyzer.analysis.codepaths import CODE_PATHS
from runlens.analyzer.analysis.nodestats import NODE_STATS, node_stats
from runlens.analyzer.analysis.stepselect import STEP_FLAGS, StepChoice, analysed, step_flags
from runlens.analyzer.analysis.views import DEFAULT_TREE, VIEWS, ViewOptions, op_view
from runlens.analyzer.load import load_run
from tests.conftest import FIXTURES, ROOT

DERIVING = ("runlens.analyzer.analysis.views", "runlens.analyzer.analysis.nodestats",
            "runlens.analyzer.analysis.codepaths", "runlens.analyzer.analysis.stepselect",
            "runlens.analyzer.products")


def _product_files(run_dir, name: str) -> list:
    return sorted((run_dir / ".runlens").rglob(f"{name}-*.product"))


def test_loading_never_imports_the_views_or_computes_a_product(run_copy):
    """load.py's imports reach none of the modules that derive results, whether it reads
    the inputs (and writes the cache) or reads the cache."""
    run_dir = run_copy("cnn")
    script = ("import json, sys; from runlens.analyzer import cache; "
              "from runlens.analyzer.load import load_run; load_run(sys.argv[1]); cache.wait(); "
              "load_run(sys.argv[1]); "
              "print(json.dumps(sorted(m for m in sys.modules "
              "if m.startswith('runlens.analyzer.'))))")
    out = subprocess.run([sys.executable, "-c", script, str(run_dir)], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    imported = json.loads(out.strip().splitlines()[-1])
    assert "runlens.analyzer.load" in imported and "runlens.analyzer.cache" in imported
    assert not set(DERIVING) & set(imported), set(DERIVING) & set(imported)
    assert not _product_files(run_dir, "")  # nothing derived was computed, nor cached


def test_a_run_does_not_change_once_loaded(run_copy):
    """Every view, the checkers and a choice of steps leave the Run's attributes as they
    were (the same objects); setting or deleting one, or changing `lacks`, fails."""
    run = load_run(run_copy("cnn"))
    attributes = dict(vars(run))
    slots = dict(run._slots)
    lacks = dict(run.lacks)
    for view in VIEWS.values():
        view(run, ViewOptions())
        view(run, ViewOptions(first_step=6, last_step=12, include_warmup=True))
    checkers.run_checks(run)
    analysed(run, StepChoice(first=8))
    assert vars(run).keys() == attributes.keys()
    assert all(vars(run)[k] is v for k, v in attributes.items())
    assert run._slots == slots and dict(run.lacks) == lacks
    with pytest.raises(AttributeError, match="does not change"):
        run.node_stats = {}  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="does not change"):
        run.paths = ()
    with pytest.raises(AttributeError, match="does not change"):
        del run.origin
    with pytest.raises(TypeError, match="read-only"):
        run.lacks["graph"] = "changed"  # type: ignore[index]
    assert run.memo.values  # what was derived lives in the products' memo


def test_a_second_process_reads_the_products_from_the_cache(run_copy, cache_beside_data):
    """The first analysis computes the per-node numbers, step flags, code paths and
    trees and caches them; a second process reads them (neither the executions nor the
    code traces are read) and shows the same views as a fresh ingest."""
    run_dir = run_copy("cnn")
    script = ("import json, sys; from runlens.analyzer.load import load_run; "
              "from runlens.analyzer.analysis.views import VIEWS, ViewOptions; "
              "run = load_run(sys.argv[1]); "
              "views = {k: "
              "VIEWS[k](run, ViewOptions()).rows.to_dicts() for k in ('ops', 'scopes', "
              "'code')}; print(json.dumps({'read': [n for n in ('executions', 'code') "
              "if run.is_read(n)], 'views': views}))")

    def analyse() -> dict:
        out = subprocess.run([sys.executable, "-c", script, str(run_dir)], check=True,
                             capture_output=True, text=True, cwd=ROOT).stdout
        return json.loads(out.strip().splitlines()[-1])

    first = analyse()
    for name in ("node_stats", "step_flags", "code_paths", "tree"):
        assert _product_files(run_dir, name), name
    second = analyse()
    assert first["read"] == ["executions", "code"] and second["read"] == []
    assert second["views"] == first["views"]
    fresh = load_run(run_dir, use_cache=False)
    for kind, rows in second["views"].items():
        expected = VIEWS[kind](fresh, ViewOptions()).rows.to_dicts()
        assert rows == json.loads(json.dumps(expected)), kind


def _forget_digests() -> None:
    for memo in (products.code_digest, products._module_digest, products._imports_of):
        memo.cache_clear()


@pytest.fixture
def fresh_digests():
    """Producer digests computed in the test are forgotten after it."""
    _forget_digests()
    yield
    _forget_digests()


def _edited(monkeypatch, module: str) -> None:
    """The engine's source as if `module` had been edited (one comment added)."""
    original = products._source

    def source(name: str):
        found = original(name)
        if name == module and found is not None:
            return found[0], found[1] + b"\n# edited\n"
        return found

    monkeypatch.setattr(products, "_source", source)
    _forget_digests()
    for producer in products.PRODUCERS.values():
        monkeypatch.delitem(producer.__dict__, "digest", raising=False)


def test_a_producers_digest_covers_the_modules_it_imports(monkeypatch, fresh_digests):
    assert "runlens.analyzer.model" in NODE_STATS.modules
    assert {"runlens.analyzer.analysis.nodestats", "runlens.analyzer.analysis.codepaths",
            "runlens.analyzer.analysis.treeorder"} <= set(DEFAULT_TREE.modules)
    assert "runlens.analyzer.schema" in CODE_PATHS.modules
    before = {name: p.digest for name, p in products.PRODUCERS.items()}
    # warmup is imported by stepselect, not by nodestats
    _edited(monkeypatch, "runlens.analyzer.analysis.warmup")
    after = {name: p.digest for name, p in products.PRODUCERS.items()}
    assert after["step_flags"] != before["step_flags"] and after["tree"] != before["tree"]
    assert after["node_stats"] == before["node_stats"]
    assert after["code_paths"] == before["code_paths"]


def test_a_cached_product_is_not_read_once_its_code_changed(run_copy, monkeypatch,
                                                             fresh_digests, cache_beside_data):
    """A product is served from the key its code digest is part of: a frame kept under
    the current key is what the next analysis gets (here a planted one); once the
    producer's module changes, it is computed again (and kept under the new key)."""
    run_dir = run_copy("mlp")
    first = load_run(run_dir)
    expected = node_stats(analysed(first))
    cache.wait()
    [kept] = _product_files(run_dir, "node_stats")
    planted = expected.head(3)
    productcache.write_later(analysed(first).origin, "node_stats", (-1,), NODE_STATS.digest,
                             planted)
    cache.wait()
    assert_frame_equal(node_stats(analysed(load_run(run_dir))), planted)
    _edited(monkeypatch, "runlens.analyzer.analysis.nodestats")
    assert_frame_equal(node_stats(analysed(load_run(run_dir))), expected)
    cache.wait()
    assert len(_product_files(run_dir, "node_stats")) == 2 and kept.exists()


def test_a_damaged_product_is_computed_again(run_copy, cache_beside_data):
    run_dir = run_copy("mlp")
    expected = node_stats(analysed(load_run(run_dir)))
    cache.wait()
    [kept] = _product_files(run_dir, "node_stats")
    data = bytearray(kept.read_bytes())
    data[-20] ^= 0xFF
    kept.write_bytes(bytes(data))
    assert_frame_equal(node_stats(analysed(load_run(run_dir))), expected)
    cache.wait()
    assert productcache.read(analysed(load_run(run_dir)).origin, "node_stats", (-1,),
                             NODE_STATS.digest) is not None  # rewritten whole


def test_products_of_several_workers_follow_every_worker(tmp_path, cache_beside_data):
    """A run of two run dirs keeps its products under both parts' caches: when one
    worker's inputs change, the next analysis computes them again."""
    for w in range(2):
        run_dir = tmp_path / "exp" / f"worker-{w}"
        shutil.copytree(FIXTURES / "mlp", run_dir, ignore=shutil.ignore_patterns(".runlens"))
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["task"] = None  # workers are named by their folders
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    path = tmp_path / "exp"
    before = load_run(path)
    flags, ops = step_flags(before), op_view(before, ViewOptions()).rows
    cache.wait()
    assert _product_files(path / "worker-0", "step_flags")
    for step_file in sorted((path / "worker-1" / "steps").iterdir())[:2]:
        step_file.unlink()
    after, fresh = load_run(path), load_run(path, use_cache=False)
    assert_frame_equal(step_flags(after), step_flags(fresh))
    assert step_flags(after).height == flags.height - 2
    assert op_view(after, ViewOptions()).rows.equals(op_view(fresh, ViewOptions()).rows)
    assert not ops.equals(op_view(after, ViewOptions()).rows)


def test_products_of_chosen_steps_are_kept_under_the_steps_kept(run_copy):
    """`--steps` picks a Run of some steps: its per-node numbers are cached under the
    steps it keeps (read back by any choice that keeps the same ones) and follow the
    choice (another range, other numbers), equal to a fresh ingest's."""
    run_dir = run_copy("cnn")
    fresh = load_run(run_dir, use_cache=False)
    some, other = ViewOptions(first_step=6, last_step=10), ViewOptions(first_step=12)
    first = load_run(run_dir)
    for opts in (some, other):
        op_view(first, opts)
    cache.wait()
    warm = load_run(run_dir)
    for opts in (some, other):
        assert op_view(warm, opts).rows.equals(op_view(fresh, opts).rows)
    assert not warm.is_read("executions")
    same_steps = ViewOptions(first_step=5, last_step=11, include_warmup=True)
    assert op_view(warm, same_steps).rows.equals(op_view(fresh, some).rows)
    assert not warm.is_read("executions")
    assert not op_view(warm, some).rows.equals(op_view(warm, other).rows)
    assert analysed(warm, StepChoice(first=5, last=11, include_warmup=True)) is analysed(
        warm, StepChoice(first=6, last=10))  # one Run for the same steps


def test_whole_run_products_are_shared_by_its_choices_of_steps():
    run = load_run(FIXTURES / "cnn", use_cache=False)
    sub = analysed(run)
    assert sub is not run and sub.whole is run and sub.origin is None
    assert step_flags(sub) is step_flags(run)  # the whole run's flags
    assert STEP_FLAGS(sub).height == len(run.steps)
    assert CODE_PATHS(sub) is CODE_PATHS(run)
    assert node_stats(sub) is not node_stats(run)
    assert isinstance(node_stats(sub), pl.DataFrame)

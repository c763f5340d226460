"""The view commands: formats, every row in JSON, options, errors, critical path."""

from __future__ import annotations

import csv
import io
import json

import polars as pl
import pytest

from runlens.analyzer.analysis.nodestats import node_stats
from runlens.analyzer.analysis.stepselect import analysed
from runlens.analyzer.analysis.views import VIEWS, ViewOptions
from runlens.analyzer.errors import RunlensError
from runlens.analyzer.load import load_run
from runlens.analyzer.registries import formats, renderer
from tests.conftest import FIXTURES, run_cli

ROW_KEYS = {"name", "micros", "cpu_micros", "accelerator_micros", "requested_bytes",
            "peak_bytes", "residual_bytes", "output_bytes", "params", "float_ops",
            "occurrence"}


def _walk(rows):
    for r in rows:
        yield r
        yield from _walk(r.get("children", []))


@pytest.mark.parametrize("view", ["ops", "scopes", "graph", "code"])
def test_json_rows_have_every_field_and_every_row(fixture_dir, view):
    result = run_cli([view, fixture_dir, "--format", "json", "--no-cache", "--zero-rows"])
    has_code = (fixture_dir / "op_log.pb").is_file()
    if view == "code" and not has_code:  # the run dir lacks code: said, not an empty view
        assert result.stdout == "" and "code view skipped: needs code" in result.stderr
        return
    doc = json.loads(result.stdout)  # stderr: notes on what the run lacks
    assert doc["schema"] == 1 and doc["view"] == view
    rows = list(_walk(doc["rows"]))
    assert rows, view
    for r in rows:
        assert ROW_KEYS <= set(r), set(ROW_KEYS) - set(r)
        if view in ("scopes", "code"):
            assert "children" in r and "self" in r
    stats = node_stats(analysed(load_run(fixture_dir, use_cache=False)))  # the steps views average
    if view == "ops":  # with no threshold flags, every kernel is a row
        assert {r["kernels"][0] for r in rows} == set(stats["kernel"].to_list())
        assert {t for r in rows for t in r["op_types"]} == set(stats["op_type"].to_list())
        assert sum(r["micros"] for r in rows) == doc["total"]["micros"] == stats["micros"].sum()
    if view == "graph":
        assert len(rows) == stats["name"].n_unique()
    if view == "scopes":  # every node is in the tree, and totals add up at the top
        names = {r["name"] for r in rows}
        assert set(stats["name"].to_list()) <= names
        assert sum(r["micros"] for r in doc["rows"]) == doc["total"]["micros"]


def test_csv_and_text(fixture_dir):
    out = run_cli(["scopes", fixture_dir, "--format", "csv", "--no-cache"]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and {"name", "depth", "parent", "micros", "self_micros"} <= set(rows[0])
    text = run_cli(["ops", fixture_dir, "--no-cache", "--select", "micros,params"]).stdout
    assert text.splitlines()[0].startswith("kernel") and "total (average over steps)" in text
    text = run_cli(["ops", fixture_dir, "--no-cache", "--tfprof"]).stdout
    assert text.splitlines()[0].startswith("op type")


def test_thresholds_and_regexes_filter_rows():
    run_dir = FIXTURES / "cnn"
    doc = json.loads(run_cli(["ops", run_dir, "--format", "json", "--min-micros", "50",
                              "--no-cache"]).stdout)
    assert doc["rows"] and all(r["micros"] >= 50 for r in doc["rows"])
    doc = json.loads(run_cli(["scopes", run_dir, "--format", "json", "--max-depth", "1",
                              "--show-name-regexes", "conv.*", "--no-cache"]).stdout)
    assert {r["name"] for r in doc["rows"]} == {"conv1", "conv2"}
    assert all(r["children"] == [] for r in doc["rows"])


def test_step_selects_one_step():
    run_dir = FIXTURES / "mlp"
    run = load_run(run_dir, use_cache=False)
    step = run.steps[1]
    doc = json.loads(run_cli(["ops", run_dir, "--step", step, "--format", "json",
                              "--no-cache"]).stdout)
    one = run.nodes.filter((pl.col("step") == step) & (pl.col("all_start_us") > 0))
    us = one.select(pl.when(pl.col("op_end_rel_us") == 0).then(1)
                    .otherwise(pl.col("op_end_rel_us")).sum()).item()
    assert doc["step"] == step and doc["total"]["micros"] == us


@pytest.mark.parametrize("args, message", [
    (["ops", FIXTURES / "mlp", "--step", "99999"], "was not traced"),
    (["scopes", FIXTURES / "mlp", "--hide-name-regexes", "("], "bad regex"),
    (["ops", FIXTURES / "mlp", "--select", "nope"], "select"),
])
def test_bad_options_exit_2_with_one_line(args, message):
    out = run_cli([*args, "--no-cache"], expect_exit=2).output
    assert message in out and len(out.strip().splitlines()) == 1


def test_renderers_handle_an_empty_view():
    run = load_run(FIXTURES / "plain_session", use_cache=False)
    nothing = ViewOptions(show_name_regexes=("no such node",))
    for kind, view_fn in VIEWS.items():
        view = view_fn(run, nothing)
        assert view.rows.height == 0
        for fmt in formats("view"):
            render = renderer("view", fmt)
            if fmt in ("speedscope", "pprof") and kind not in ("scopes", "code"):
                with pytest.raises(RunlensError, match="draws a tree"):
                    render(view)  # flame graphs are of tree views only
                continue
            out = render(view)
            assert isinstance(out, bytes if fmt == "pprof" else str) and out, (kind, fmt)


def test_critical_path_of_the_input_bound_run_goes_through_the_iterator():
    run_dir = FIXTURES / "input_bound"
    doc = json.loads(run_cli(["graph", run_dir, "--critical-path", "--format", "json",
                              "--no-cache"]).stdout)
    types = [op["op_type"] for op in doc["ops"]]
    assert "IteratorGetNext" in types
    assert 0.5 < doc["share"] <= 1.0  # the wait for input is most of the step
    waits = sum(op["micros"] for op in doc["ops"] if op["op_type"] == "IteratorGetNext")
    assert waits / doc["step_us"] > 0.5
    text = run_cli(["graph", run_dir, "--critical-path", "--no-cache"]).output
    assert text.startswith("critical path of step")


@pytest.mark.parametrize("kind", ["scopes", "code"])
@pytest.mark.parametrize("options", [
    {}, {"order_by": "micros"}, {"hide_name_regexes": (".*gradients.*", ".*Adam.*")},
    {"start_name_regexes": (".*dense.*", ".*conv.*")}, {"order_by": "bytes", "max_depth": 4},
])
def test_tree_rows_are_depth_first_with_siblings_in_a_total_order(kind, options):
    """Each row follows its parent's subtree; siblings sort by order_by, then name, then key
    (code frames under hidden nodes share names, and without the key their order changed
    from process to process)."""
    opts = ViewOptions(**options)
    rows = VIEWS[kind](load_run(FIXTURES / "cnn"), opts).rows.to_dicts()
    assert rows
    metric = {"micros": "micros", "bytes": "requested_bytes"}.get(opts.order_by)
    stack: list[str] = []  # keys of the open ancestors
    last_child: dict[str | None, dict] = {}
    for row in rows:
        while stack and stack[-1] != row["parent"]:
            stack.pop()
        assert row["parent"] == (stack[-1] if stack else None), "not depth-first"
        assert row["depth"] == len(stack) + 1
        prev = last_child.get(row["parent"])
        if prev is not None:
            def sort_key(r):
                return (-r[metric] if metric else 0, r["name"], r["key"])
            assert sort_key(prev) < sort_key(row)
        last_child[row["parent"]] = row
        stack.append(row["key"])


def test_default_columns_are_those_the_run_can_fill():
    """An XSpace profile holds no per-op memory: the default text view shows no column of
    zeros for it (the run says what it lacks); an explicit --select keeps it."""
    jax = FIXTURES.parent / "xplane" / "jax_train"
    header = run_cli(["scopes", jax, "--no-cache"]).stdout.splitlines()[0]
    assert "time" in header and "requested" not in header
    asked = run_cli(["scopes", jax, "--no-cache", "--select", "micros,bytes"]).stdout
    assert "requested" in asked.splitlines()[0]
    tf = run_cli(["ops", FIXTURES / "cnn", "--no-cache"]).stdout.splitlines()[0]
    assert "requested" in tf  # a run dir has memory: tfprof's default columns

"""Parity with tfprof, the live oracle, on every fixture: op view per op type, scope totals.

Same RunMetadata, same options, step -1 and a single step. Where we differ on purpose,
the tests in the second half show both numbers (docs/views.md says why).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from runlens.analyzer.analysis.nodestats import node_stats
from runlens.analyzer.analysis.views import ViewOptions, code_view, graph_view, op_view, scope_view
from runlens.analyzer.load import load_run
from runlens.analyzer.model import Run
from tests.conftest import FIXTURES

pytest.importorskip("tensorflow")
from tests import tfprof_oracle as oracle  # noqa: E402

METRICS = {
    "micros": "exec_micros", "cpu_micros": "cpu_exec_micros",
    "accelerator_micros": "accelerator_exec_micros", "requested_bytes": "requested_bytes",
    "peak_bytes": "peak_bytes", "residual_bytes": "residual_bytes",
    "output_bytes": "output_bytes", "float_ops": "float_ops", "params": "parameters",
}
SCOPE_OPTION_SETS = [
    {},
    {"min_micros": 20},
    {"max_depth": 3},
    {"account_type_regexes": ["MatMul|Conv2D.*|BiasAdd.*"]},
    {"trim_name_regexes": ["train"]},
    {"start_name_regexes": ["dense.*|conv.*|rnn.*|loss"], "max_depth": 4},
    {"show_name_regexes": ["train/.*"]},
    {"hide_name_regexes": ["train/.*"], "account_displayed_op_only": True},
    {"min_params": 10, "account_displayed_op_only": True},
    {"order_by": "micros", "min_bytes": 1, "account_displayed_op_only": True},
    {"min_occurrence": 1, "min_output_bytes": 100},
]
CODE_OPTION_SETS = [
    {},
    {"max_depth": 6, "min_micros": 3},
    {"hide_name_regexes": [r".*\(gradient\)"]},
    {"trim_name_regexes": [r"generate.py:\d+:gen_.*"], "order_by": "micros"},
]
OP_OPTION_SETS = [{}, {"account_type_regexes": ["_trainable_variables"]},
                  {"account_type_regexes": [".*cpu:0"]}]


def _without_source(run: Run) -> Run:
    """tfprof drops _SOURCE (and RecvTensor, MEMCPY) nodes; we keep them. Compare without."""
    keep = ~pl.col("node_name").is_in(["_SOURCE", "RecvTensor"]) & ~pl.col(
        "node_name").str.contains("MEMCPY")
    return run.replace(nodes=run.nodes.filter(keep))


def _opts(kw: dict) -> ViewOptions:
    """tfprof's options as ViewOptions that reproduce tfprof's rows: nodes grouped and
    accounted by graph op type (not the kernel that ran), all-zero rows shown, max_depth
    counted from tfprof's hidden root, library code frames shown."""
    return ViewOptions.tfprof(**{k: tuple(v) if isinstance(v, list) else v
                                 for k, v in kw.items()})


def _flatten_scope(node, rows, depth=0):
    if node.name != "_TFProfRoot":
        rows.append({"name": node.name, **{f"t_{ours}": getattr(node, f"total_{theirs}")
                                           for ours, theirs in METRICS.items()},
                     "t_occurrence": node.total_run_count})
    for c in node.children:
        _flatten_scope(c, rows, depth + 1)
    return rows


def _assert_same(j: pl.DataFrame, what: str, metrics) -> None:
    for m in metrics:
        bad = j.filter(pl.col(m) != pl.col(f"t_{m}"))
        assert bad.height == 0, f"{what}: {m} differs: {bad.select('name', m, f't_{m}').rows()[:5]}"


def _check_scopes(run_dir: Path, run: Run, kw: dict) -> None:
    schema = {"name": pl.String, **{f"t_{m}": pl.Int64 for m in [*METRICS, "occurrence"]}}
    theirs = pl.DataFrame(_flatten_scope(oracle.scope_view(run_dir, **kw), []), schema=schema)
    view = scope_view(run, _opts(kw))
    ours = view.rows
    what = f"{run_dir.name} scopes {kw}"
    assert sorted(ours["name"].to_list()) == sorted(theirs["name"].to_list()), what
    j = ours.join(theirs, on="name")
    _assert_same(j, what, [*METRICS, "occurrence"])
    root = oracle.scope_view(run_dir, **kw)
    assert view.root["micros"] == root.total_exec_micros, what
    assert view.root["requested_bytes"] == root.total_requested_bytes, what


def _tfprof_op_rows(run_dir: Path, run: Run, kw: dict) -> pl.DataFrame:
    """tfprof's op view rows, with runtime-only nodes regrouped under our op type for them
    (tfprof types such a node by its own name, e.g. `_retval_loss_0_1`; see below)."""
    root = oracle.profiler(run_dir).profile_operations(oracle.options(**kw))
    our_type = dict(node_stats(run).select("name", "op_type").iter_rows())
    rows, n = [], root
    while n.children:
        n = n.children[0]
        names = [g.name for g in n.graph_nodes]
        name = our_type[n.name] if names == [n.name] and n.name in our_type else n.name
        rows.append({"name": name, **{f"t_{k}": getattr(n, v) for k, v in METRICS.items()},
                     "t_occurrence": sum(g.run_count for g in n.graph_nodes)})
    return pl.DataFrame(rows).group_by("name").agg(pl.all().sum())


def _check_ops(run_dir: Path, run: Run, kw: dict) -> None:
    theirs = _tfprof_op_rows(run_dir, run, kw)
    ours = op_view(run, _opts(kw)).rows
    what = f"{run_dir.name} ops {kw}"
    assert sorted(ours["name"].to_list()) == sorted(theirs["name"].to_list()), what
    _assert_same(ours.join(theirs, on="name"), what, [*METRICS, "occurrence"])


def _flatten_code(node, rows, path=()):
    if node.name != "_TFProfRoot":
        path = (*path, node.name)
        rows.append({"key": "\x1f".join(path),
                     **{f"t_{ours}": getattr(node, f"total_{theirs}")
                        for ours, theirs in METRICS.items()}})
    for c in node.children:
        _flatten_code(c, rows, path)
    return rows


def _check_code(run_dir: Path, run: Run, kw: dict) -> None:
    """Code view: every frame of the tree (keyed by its path) has tfprof's totals."""
    schema = {"key": pl.String, **{f"t_{m}": pl.Int64 for m in METRICS}}
    theirs = pl.DataFrame(_flatten_code(oracle.code_view(run_dir, **kw), []), schema=schema)
    ours = code_view(run, _opts(kw)).rows
    what = f"{run_dir.name} code {kw}"
    assert ours.height > 0 or kw, what  # with default options every fixture has code
    assert sorted(ours["key"].to_list()) == sorted(theirs["key"].to_list()), what
    joined = ours.drop("name").rename({"key": "name"}).join(
        theirs.rename({"key": "name"}), on="name")
    _assert_same(joined, what, METRICS)


WITH_GRAPH = sorted(p.name for p in FIXTURES.iterdir() if (p / "graph.pb").is_file())
WITHOUT_GRAPH = sorted(p.name for p in FIXTURES.iterdir() if not (p / "graph.pb").is_file())


@pytest.mark.parametrize("name", WITH_GRAPH)
def test_views_equal_tfprof(name):
    run_dir = FIXTURES / name
    run = _without_source(load_run(run_dir, use_cache=False))
    steps = run.steps
    for kw in [*SCOPE_OPTION_SETS, {"step": steps[len(steps) // 2]}]:
        _check_scopes(run_dir, run, kw)
    for kw in [*OP_OPTION_SETS, {"step": steps[-1]}]:
        _check_ops(run_dir, run, kw)
    for kw in CODE_OPTION_SETS:
        _check_code(run_dir, run, kw)


@pytest.mark.parametrize("name", WITHOUT_GRAPH)
def test_gpu_lanes_equal_tfprof(name):
    """Real GPU traces (no graph.pb): tfprof on an empty graph sees every node as a
    runtime-only node. Per node, time on the op lane (cpu), on /stream:all (accelerator),
    per-stream and memcpy lanes (neither) and run counts must be tfprof's."""
    assert WITHOUT_GRAPH, "the GPU fixtures are missing"
    run_dir = FIXTURES / name
    root = oracle.profiler(run_dir, graph=False).profile_name_scope(oracle.options())
    theirs = pl.DataFrame(oracle.time_rows(root))  # nodes and scope parents (which have no numbers)
    run = _without_source(load_run(run_dir, use_cache=False))
    ours = node_stats(run).filter(~pl.col("name").str.contains("MEMCPY"))
    assert ours["accelerator_micros"].sum() > 0
    assert set(ours["name"].to_list()) <= set(theirs["name"].to_list())
    only_theirs = theirs.join(ours, on="name", how="anti")
    assert (only_theirs["t_micros"] == 0).all() and (only_theirs["t_occurrence"] == 0).all()
    _assert_same(ours.join(theirs, on="name"), name,
                 ["micros", "cpu_micros", "accelerator_micros", "occurrence"])


# ----------------------------------------------------------------------------- on purpose


def test_source_node_is_kept_tfprof_drops_it():
    run_dir = FIXTURES / "mlp"
    run = load_run(run_dir, use_cache=False)
    ours = op_view(run, ViewOptions.tfprof()).rows.filter(pl.col("name") == "NoOp")
    theirs = _tfprof_op_rows(run_dir, run, {}).filter(pl.col("name") == "NoOp")
    source = node_stats(run).filter(pl.col("name") == "_SOURCE")
    assert source.height == 1 and source["occurrence"][0] == 1
    assert ours["occurrence"][0] == theirs["t_occurrence"][0] + 1
    assert ours["micros"][0] == theirs["t_micros"][0] + source["micros"][0]


def test_runtime_only_nodes_are_typed_from_partition_graphs_not_their_name():
    run_dir = FIXTURES / "mlp"
    run = load_run(run_dir, use_cache=False)
    root = oracle.profiler(run_dir).profile_operations(oracle.options())
    tfprof_types, n = set(), root
    while n.children:
        n = n.children[0]
        tfprof_types.add(n.name)
    # tfprof: every fed placeholder and fetched tensor is an "op type" of its own.
    assert {"_arg_inputs/x_0_0", "_arg_inputs/y_0_1"} <= tfprof_types
    ours = set(op_view(run, ViewOptions.tfprof()).rows["name"].to_list())
    assert {"_Arg", "_Retval"} <= ours and not any(t.startswith("_arg_") for t in ours)


def test_op_view_thresholds_compare_own_numbers_not_running_totals():
    """tfprof's op view filters on totals that accumulate down its sorted list, so an op
    type far below min_micros is shown when it sorts early. We test each type's own time."""
    run_dir = FIXTURES / "mlp"
    run = _without_source(load_run(run_dir, use_cache=False))
    kw = {"min_micros": 50, "order_by": "name"}
    root = oracle.profiler(run_dir).profile_operations(oracle.options(**kw))
    shown, n = {}, root
    while n.children:
        n = n.children[0]
        shown[n.name] = n.exec_micros
    small = {k: v for k, v in shown.items() if v < 50}
    assert small, "tfprof shows op types below min_micros (running totals)"
    ours = op_view(run, _opts(kw)).rows
    assert (ours["micros"] >= 50).all()
    assert not set(small) & set(ours["name"].to_list())


def test_overlapping_account_regexes_count_a_node_once():
    run_dir = FIXTURES / "mlp"
    run = _without_source(load_run(run_dir, use_cache=False))
    kw = {"account_type_regexes": ["MatMul", ".*Mat.*"]}
    theirs = _tfprof_op_rows(run_dir, run, kw).filter(pl.col("name") == "MatMul")
    once = _tfprof_op_rows(run_dir, run, {"account_type_regexes": ["MatMul"]}).filter(
        pl.col("name") == "MatMul")
    ours = op_view(run, _opts(kw)).rows.filter(pl.col("name") == "MatMul")
    assert theirs["t_micros"][0] == 2 * once["t_micros"][0]  # tfprof counts MatMul twice
    assert ours["micros"][0] == once["t_micros"][0]


def test_scope_totals_do_not_include_unaccounted_parents():
    """account_type_regexes=['ReadVariableOp']: tfprof still adds a VarHandleOp parent's own
    params and time to its total because ReadVariableOps sit below it. We do not."""
    run_dir = FIXTURES / "mlp"
    run = _without_source(load_run(run_dir, use_cache=False))
    kw = {"account_type_regexes": ["ReadVariableOp"]}
    theirs = {r["name"]: r for r in _flatten_scope(oracle.scope_view(run_dir, **kw), [])}
    ours = scope_view(run, _opts(kw)).rows.filter(pl.col("name") == "dense1/weights")
    # The variable and its two Adam slots are VarHandleOps, none of them accounted.
    handles = node_stats(run).filter(
        pl.col("name").str.starts_with("dense1/weights") & (pl.col("op_type") == "VarHandleOp"))
    assert handles.height == 3
    assert theirs["dense1/weights"]["t_params"] == handles["params"].sum() > 0
    assert ours["params"][0] == 0  # ReadVariableOps have no params


def test_fused_kernel_vs_tfprof_op_type():
    """A real fused capture (fixtures/runs/fused_cnn, TF 2.21 CPU): Grappler ran each
    Conv2D+BiasAdd+Relu as one _MklNativeFusedConv2D named after the Relu node. tfprof
    types nodes from graph.pb, so it reports the convolutions' time as `Relu` and has no
    forward Conv2D time; our default (op_types "kernel") shows the kernel that ran, with
    the ops it fused. Same nodes, same microseconds, another name (docs/views.md)."""
    run_dir = FIXTURES / "fused_cnn"
    run = _without_source(load_run(run_dir, use_cache=False))
    theirs = _tfprof_op_rows(run_dir, run, {})
    tfprof_relu = theirs.filter(pl.col("name") == "Relu")
    tfprof_conv = theirs.filter(pl.col("name") == "Conv2D")
    # tfprof averages over every traced step (step 12 of this capture is a contention
    # spike, 7.1 ms vs 1.3-1.9 ms, that our default leaves out: analyzer.analysis.stepselect).
    ours = op_view(run, ViewOptions(include_warmup=True)).rows
    fused = ours.filter(pl.col("name") == "_FusedConv2D (Conv2D+BiasAdd+Relu)")
    print(f"tfprof: Relu {tfprof_relu['t_micros'][0]}us, Conv2D "
          f"{tfprof_conv['t_micros'].sum()}us; runlens: {fused['name'][0]} "
          f"{fused['micros'][0]}us over graph op types {fused['op_types'][0].to_list()}")
    assert fused["micros"][0] == tfprof_relu["t_micros"][0] > 0
    assert fused["op_types"][0].to_list() == ["Relu"]
    assert tfprof_conv["t_micros"].sum() == 0  # tfprof: the forward Conv2D took no time
    assert "Relu" not in ours["name"].to_list()
    # tfprof's grouping stays available, and gives tfprof's row.
    graph_rows = op_view(run, ViewOptions(op_types="graph", include_warmup=True)).rows
    assert graph_rows.filter(pl.col("name") == "Relu")["micros"][0] == fused["micros"][0]
    # The graph view keeps the node's graph op type next to its kernel.
    node = graph_view(run, ViewOptions()).rows.filter(pl.col("name") == "conv1/Relu")
    assert node.select("op_type", "kernel", "fused_ops").row(0) == (
        "Relu", "_FusedConv2D", "Conv2D+BiasAdd+Relu")

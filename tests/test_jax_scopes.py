"""JAX scopes as the user named them (issue 23, points 3 and 4): transform wrappers folded
into the user's scope, forward and backward in one row with the split beside, in the scope
and code views, the timeline's args; code locations of JAX ops from HLO metadata."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from runlens.analyzer.analysis.jaxscopes import BACKWARD, FORWARD, fold
from tests.conftest import ROOT, run_cli
from tests.xplane_run import hlo_modules

JAX_FIXTURE = ROOT / "fixtures" / "xplane" / "jax_train"
GPU_JAX = ROOT.parent / "shared" / "data" / "gpu-jax"
needs_gpu_jax = pytest.mark.skipif(not GPU_JAX.is_dir(), reason="no shared/data/gpu-jax")
WRAPPER = re.compile(r"(^|/)(jit|pjit|jvp|transpose|vmap)\(")


def _hlo_op_names(logdir) -> set[str]:
    """Every OpMetadata.op_name of the train step's HLO module, read with protobuf."""
    return {i.metadata.op_name for module in hlo_modules(logdir)
            if "train_step" in module.name for c in module.computations
            for i in c.instructions if i.metadata.op_name}


def _jax_names(fn, *args) -> set[str]:
    """The op names JAX itself writes for `fn` (its lowering's locations)."""
    text = fn.lower(*args).as_text(debug_info=True)
    return {n for n in re.findall(r'loc\("([^"]+)"', text) if "/" in n}


def test_fold_on_names_jax_writes_for_every_transform():
    """checkpoint (remat replay re-enters the scope), vmap, scan, nested jit, an empty
    transform: names from a live JAX lowering, not written by hand."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def layer(w, x):
        with jax.named_scope("mlp"):
            return jnp.tanh(x @ w)

    def loss(ws, x):
        with jax.named_scope("block0"):
            h = jax.checkpoint(layer)(ws[0], x)
        with jax.named_scope("block1"):
            h = jax.vmap(lambda r: layer(ws[1], r))(h)
        with jax.named_scope("rnn"):
            h, _ = jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), h,
                                jnp.stack([ws[1], ws[1]]))
        return jnp.sum(jax.nn.relu(h))

    step = jax.jit(lambda ws, x: jax.grad(loss)(ws, x))
    names = _jax_names(step, [jnp.ones((8, 8))] * 2, jnp.ones((4, 8)))
    folded = {n: fold(n) for n in names}
    for name, (scope, _) in folded.items():
        assert not WRAPPER.search(scope.rsplit("/", 1)[0]), (name, scope)
        assert "checkpoint/" not in scope and "rematted_computation" not in scope
    remat = [n for n in names if "rematted_computation/mlp/" in n]
    assert remat and all(folded[n][0].startswith("block0/mlp/") and folded[n][1] == BACKWARD
                         for n in remat)
    assert any(s == "block1/mlp/dot_general" and d == BACKWARD for s, d in folded.values())
    assert any(s == "block1/mlp/dot_general" and d == FORWARD for s, d in folded.values())
    assert any(s.startswith("rnn/") for s, _ in folded.values())
    assert not any("/while/body/" in s for s, _ in folded.values())  # the scan's loop folded
    # Forward and backward of a scope fold into the same one.
    scopes = {(s.split("/")[0], d) for s, d in folded.values() if d}
    for top in ("block0", "block1", "rnn"):
        assert {(top, FORWARD), (top, BACKWARD)} <= scopes


def test_fold_of_older_jax_names():
    """JAX before 0.4.x: `pjit(f)` for the program, `jit(main)` for its entry function
    (the form the xplane_hlo docstring quotes), `pmap(f)`; the rule is the same."""
    assert fold("jit(train_step)/jit(main)/dense1/dot_general") == ("dense1/dot_general", "")
    assert fold("pjit(step)/jit(main)/transpose(jvp(block0))/mlp/dot_general") == (
        "block0/mlp/dot_general", BACKWARD)
    assert fold("pmap(step)/jvp(layer)/vmap(attn)/dot_general") == (
        "layer/attn/dot_general", FORWARD)


def test_fold_leaves_tensorflow_and_unnamed_hlo_names_alone():
    for name in ("conv1/Conv2D", "train/gradients/loss/Mean_grad/Tile", "add.21.0",
                 "args[0]", "unattributed:fusion_12"):
        assert fold(name) == (name, "")


@needs_gpu_jax
@pytest.mark.parametrize("capture", ["xf_a_nocb", "cnn_a"])
def test_gpu_jax_hlo_names_fold_to_one_tree(capture):
    """Every op name in the H100 programs' HLO metadata: no wrapper left in a folded
    scope, and each user scope gets both passes (the transformer's blockN/attn and mlp,
    the CNN's stageN/block)."""
    names = _hlo_op_names(GPU_JAX / capture)
    assert len(names) > 150
    folded = [fold(n) for n in names]
    for scope, _ in folded:
        assert not WRAPPER.search(scope.rsplit("/", 1)[0]), scope
    parts = {(s.rsplit("/", 1)[0], d) for s, d in folded}
    wanted = ([f"block{i}/{m}" for i in range(6) for m in ("attn", "mlp")]
              if capture.startswith("xf") else [f"stage{i}/block" for i in range(4)])
    for scope in wanted:
        assert (scope, FORWARD) in parts and (scope, BACKWARD) in parts, scope


def _scopes(*flags):
    out = run_cli(["scopes", JAX_FIXTURE, "--format", "json", "--no-cache", *flags]).stdout
    return json.loads(out)


def test_scope_view_folds_and_keeps_the_split():
    """`dense1` is one row; its time is the raw jvp(dense1) and transpose(jvp(dense1))
    rows' together, and forward/backward are those two."""
    folded = {r["name"]: r for r in _scopes()["rows"]}
    raw = {r["name"]: r for r in _scopes("--raw-scopes")["rows"][0]["children"]}
    assert set(folded) >= {"dense1", "dense2", "loss", "sgd"}
    for scope in ("dense1", "dense2", "loss"):
        fwd = raw[f"jit(train_step)/jvp({scope})"]["micros"]
        bwd = raw[f"jit(train_step)/transpose(jvp({scope}))"]["micros"]
        row = folded[scope]
        # times to the nanosecond (XSpace keeps them exact): the sum of the two raw rows
        assert (row["micros"], row["forward_micros"], row["backward_micros"]) == pytest.approx(
            (fwd + bwd, fwd, bwd), abs=0.002)
    assert folded["sgd"]["forward_micros"] == folded["sgd"]["backward_micros"] == 0
    text = run_cli(["scopes", JAX_FIXTURE, "--no-cache", "--max-depth", "1"]).stdout
    assert "forward/backward" in text.splitlines()[0]
    assert not any("jvp(" in line for line in text.splitlines())


def test_raw_scopes_flag_keeps_the_paths():
    text = run_cli(["scopes", JAX_FIXTURE, "--no-cache", "--raw-scopes"]).stdout
    assert "jit(train_step)/transpose(jvp(dense1))" in text
    assert "forward/backward" not in text


def test_tensorflow_scopes_have_no_pass_columns():
    doc = json.loads(run_cli(["scopes", ROOT / "fixtures" / "runs" / "cnn", "--format",
                              "json", "--no-cache"]).stdout)
    assert "backward_micros" not in doc["rows"][0]


def test_code_view_of_jax_holds_both_passes_per_line():
    doc = json.loads(run_cli(["code", JAX_FIXTURE, "--format", "json", "--no-cache"]).stdout)
    top = doc["rows"][0]
    assert top["forward_micros"] > 0 and top["backward_micros"] > 0
    assert top["forward_micros"] + top["backward_micros"] <= top["micros"]
    lines = []

    def walk(rows):
        for r in rows:
            lines.append(r["name"])
            walk(r["children"])

    walk(doc["rows"])
    assert not any(n.endswith("(gradient)") for n in lines)  # one row, not a copy
    assert "lacks code" not in run_cli(["advise", JAX_FIXTURE, "--no-cache"]).output


def test_timeline_args_carry_the_folded_scope_and_pass(tmp_path):
    out = tmp_path / "t.json"
    run_cli(["timeline", JAX_FIXTURE, "-o", out, "--no-cache"])
    ops = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "Op"]
    by_name = {e["args"]["name"]: e["args"] for e in ops}
    fwd = by_name["jit(train_step)/jvp(dense1)/dot_general"]
    assert (fwd["scope"], fwd["pass"]) == ("dense1", "forward")
    bwd = [a for n, a in by_name.items() if n.startswith("jit(train_step)/transpose(jvp(")]
    assert bwd and all(a["pass"] == "backward" and "(" not in a["scope"] for a in bwd)


@needs_gpu_jax
def test_gpu_jax_code_locations_from_hlo_metadata():
    """A JAX GPU profile has code (no false 'lacks code'): each op's frames from the HLO
    stack frame index, user frames first. block3's MLP matmul, forward and backward, sit
    on one line of the model function, below the attention's (the source order; the
    capture_jax.py kept in shared/ was edited after the capture, so its line numbers
    are not the profile's), and optax's frames are library frames."""
    from runlens.analyzer.analysis.codepaths import code_paths
    from runlens.analyzer.load import load_run

    run = load_run(GPU_JAX / "xf_a_nocb", use_cache=False)
    assert "code" not in run.lacks
    paths = code_paths(run)

    def innermost(pattern: str) -> set[tuple[str, int, str]]:
        rows = paths.filter(pl.col("name").str.contains(pattern))
        out = set()
        for p in rows["user_path"].to_list():
            file, line, func = p[-1].split(":", 2)
            out.add((file, int(line), func))
        return out

    mlp = innermost(r"jvp\(block3\)\)?/mlp/dot_general$")
    assert len(mlp) == 1  # forward and backward: the same line
    file, mlp_line, func = mlp.pop()
    assert file == "capture_jax.py" and func.startswith("build_xformer.")
    attn = innermost(r"^jit\(train_step\)/jvp\(block3\)/attn/dot_general$")
    assert attn and all(line < mlp_line for _, line, _ in attn)
    opt = paths.filter(pl.col("name").str.contains("/optimizer/"))
    assert opt.height and not any("optax" in f or "_tree_math" in f
                                  for p in opt["user_path"].to_list() for f in p)
    assert "lacks code" not in run_cli(["advise", GPU_JAX / "xf_a_nocb", "--no-cache"]).output


def test_report_shows_the_folded_scopes_with_their_passes(tmp_path):
    """The HTML report's scope chart reads the scope view's document: folded names, the
    forward/backward split in its tooltip."""
    from runlens.analyzer.load import load_run
    from runlens.analyzer.report.run_data import run_data

    doc = run_data(load_run(JAX_FIXTURE, use_cache=False), [], str(JAX_FIXTURE))
    rows = {r["name"]: r for r in doc["scopes"]["rows"]}
    assert rows["dense1"]["forward_micros"] + rows["dense1"]["backward_micros"] \
        == rows["dense1"]["micros"]
    assert not any("jvp(" in name for name in rows)
    out = tmp_path / "r.html"
    run_cli(["report", JAX_FIXTURE, "-o", out, "--no-cache"])
    assert "forward_micros" in out.read_text()


def xprof_folded_scopes(logdir, depth: int = 2) -> pl.DataFrame:
    """xprof's hlo_stats of a profile (its attribution of kernels to HLO ops, exact with
    command buffers off), folded into the user's scopes: scope, direction, total_us."""
    import shutil
    import tempfile

    from xprof.convert import raw_to_tool_data

    from runlens.analyzer.analysis.jaxscopes import fold_frame
    from runlens.analyzer.sources.xplane import xplane_files

    path = xplane_files(logdir)[0]
    with tempfile.TemporaryDirectory() as tmp:
        copy = f"{tmp}/{path.name}"
        shutil.copy(path, copy)
        data, _ = raw_to_tool_data.xspace_to_tool_data([copy], "hlo_stats", {})
    table = json.loads(data)
    table = table[0] if isinstance(table, list) else table
    cols = [c["id"] for c in table["cols"]]
    rows = [[(v or {}).get("v") for v in r["c"]] for r in table["rows"]]
    frame = pl.DataFrame({"name": [r[cols.index("tf_op_name")] or "" for r in rows],
                          "us": [float(r[cols.index("total_time")]) for r in rows]})
    return (fold_frame(frame).with_columns(
        scope=pl.col("scope").str.split("/").list.head(depth).list.join("/"))
        .group_by("scope", "direction").agg(total_us=pl.col("us").sum()))


@needs_gpu_jax
def test_xprofs_attribution_folds_into_one_row_per_scope():
    """On the command-buffers-off transformer, xprof attributes every kernel to an HLO op;
    folded, each blockN/attn and blockN/mlp is one scope holding both passes, and
    nothing is lost (the folded total is xprof's total)."""
    pytest.importorskip("xprof")
    folded = xprof_folded_scopes(GPU_JAX / "xf_a_nocb")
    total = folded["total_us"].sum()
    per_scope = folded.group_by("scope").agg(
        share=pl.col("total_us").sum() / total,
        passes=pl.col("direction").filter(pl.col("total_us") > 0).unique().sort())
    rows = {r["scope"]: r for r in per_scope.iter_rows(named=True)}
    for i in range(6):
        for part, lo, hi in (("attn", 0.08, 0.095), ("mlp", 0.055, 0.065)):
            row = rows[f"block{i}/{part}"]
            assert row["passes"] == [BACKWARD, FORWARD]
            assert lo < row["share"] < hi, (i, part, row["share"])
    assert not any(WRAPPER.search(s) for s in rows)

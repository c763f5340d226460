"""JAX programs as users wrote them (issue 32 point 1): scan, remat/checkpoint, cond,
fori_loop, vmap, shard_map, pmap and flax's nn.scan(nn.remat(Block)) fold into the user's
scopes, on CPU captures of the pinned JAX (fixtures/generate_jax_forms.py) and on the
shared JAX 0.11.2 GPU captures."""

from __future__ import annotations

import json
import re

import pytest

from runlens.analyzer.analysis.jaxscopes import BACKWARD, FORWARD, fold
from tests.conftest import ROOT, run_cli
from tests.xplane_run import hlo_modules

FORMS = ROOT / "fixtures" / "xplane" / "jax_forms"
GPU_JAX = ROOT.parent / "shared" / "data" / "gpu-jax"
needs_gpu_jax = pytest.mark.skipif(not GPU_JAX.is_dir(), reason="no shared/data/gpu-jax")
# A wrapper element JAX writes, anywhere in a scope path but its leaf (the op itself).
WRAPPER = re.compile(r"(^|/)((jit|pjit|jvp|transpose|vmap|shard_map|pmap|xla_pmap)\(|"
                     r"(while/(body|cond|body_pred)|cond/branch_\d+_fun|closed_call|eval_jaxpr"
                     r"|checkpoint|rematted_computation|remat2?|custom_[jv]+p_call|shard_map"
                     r"|pmap|xla_pmap)(/|$))")
CONTROL = ("while", "conditional", "call")


def _executed(module) -> dict[str, bool]:
    """op_name -> whether it sits in a loop's, a branch's or a call's computation, for the
    instructions of computations that run as such (the entry and what while, conditional
    and call reach; not reduce regions or fused computations)."""
    comps = {c.id: c for c in module.computations}
    out: dict[str, bool] = {}

    def walk(cid: int, inside: bool) -> None:
        for inst in comps[cid].instructions:
            if inst.metadata.op_name:
                out[inst.metadata.op_name] = out.get(inst.metadata.op_name, False) or inside
            if inst.opcode in CONTROL:
                for sub in inst.called_computation_ids:
                    walk(sub, True)

    walk(module.entry_computation_id, False)
    return out


def _scope(name: str) -> str:
    return fold(name)[0].rsplit("/", 1)[0]


CPU = ["plain", "shard", "flax_lm", "flax_cnn"]


@pytest.mark.parametrize("capture", [*(FORMS / c for c in CPU),
                                     *(GPU_JAX / c for c in ("flx_scan", "flx_scan_nocb"))],
                         ids=lambda p: p.name)
def test_every_wrapper_folds_and_the_loop_pairs_sit_in_loop_computations(capture):
    """Each executed instruction's name folds with no wrapper element left; a loop's or a
    branch's pair (`while/body`, `cond/branch_1_fun`) is only in names of instructions the
    HLO puts in a while body/condition or a branch (what the fold's pair rule assumes)."""
    if not capture.is_dir():
        pytest.skip(f"no {capture}")
    pairs = re.compile(r"/(while/(body|cond|body_pred)|cond/branch_\d+_fun)/")
    seen = 0
    for module in hlo_modules(capture):
        for name, inside in _executed(module).items():
            seen += 1
            assert not WRAPPER.search(_scope(name)), (name, fold(name))
            if pairs.search(name):
                assert inside, name
    assert seen > 20


def test_user_scopes_named_like_jax_elements_stay():
    """`body`, `cond` and `while` as the user's own scopes (no loop, no branch) are kept;
    names from a live JAX lowering. (A user's scope `while` holding one named `body`
    would read as a loop's pair: the fold reads names, not the HLO.)"""
    jax = pytest.importorskip("jax")

    def f(x):
        with jax.named_scope("body"), jax.named_scope("cond"):
            x = jax.numpy.tanh(x)
        with jax.named_scope("while"):
            x = jax.numpy.sin(x)
        with jax.named_scope("body"):
            return jax.lax.fori_loop(0, 2, lambda i, v: v * 2.0, x)

    text = jax.jit(f).lower(jax.numpy.ones(4)).as_text(debug_info=True)
    names = {n for n in re.findall(r'loc\("([^"]+)"', text) if "/" in n}
    scopes = {fold(n)[0] for n in names}
    assert "body/cond/tanh" in scopes
    assert "while/sin" in scopes
    assert "body/add" in scopes and "body/lt" in scopes  # the loop's counter, the loop gone


def _rows(capture, *flags) -> dict[str, dict]:
    doc = json.loads(run_cli(["scopes", capture, "--format", "json", "--no-cache",
                              "--max-depth", "9", *flags]).stdout)
    out: dict[str, dict] = {}

    def walk(rows):
        for r in rows:
            out[r["name"]] = r
            walk(r["children"])

    walk(doc["rows"])
    return out


def _no_wrapper_rows(rows: dict[str, dict]) -> None:
    for name in rows:
        assert not WRAPPER.search(name.rsplit("/", 1)[0]), name


@pytest.mark.parametrize("capture,scopes", [
    ("flax_lm", ["LM/layers/attn", "LM/layers/up", "LM/layers/down", "LM/lm_head"]),
    ("plain", ["rnn", "refine", "gate", "head", "block0/mlp"]),
    ("shard", ["CNN/conv", "CNN/head"]),
])
def test_scope_view_reads_the_users_scopes_with_both_passes(capture, scopes):
    rows = _rows(FORMS / capture)
    _no_wrapper_rows(rows)
    for scope in scopes:
        row = rows[scope]
        assert row["forward_micros"] > 0 and row["backward_micros"] > 0, scope
    assert not any(n.split("/")[0] in ("shard_map", "pmap", "while") for n in rows)


def test_raw_scopes_keep_the_loop_and_remat_elements():
    rows = _rows(FORMS / "flax_lm", "--raw-scopes")
    assert any("/while/body/closed_call/checkpoint/rematted_computation/layers" in n
               for n in rows)


@needs_gpu_jax
def test_gpu_scanned_lm_folds_to_the_layers():
    """flx_scan (JAX 0.11.2, eval_jaxpr and checkpoint under the scan's body): each layer
    component gets its forward and its (rematerialised) backward."""
    names = set().union(*(_executed(m) for m in hlo_modules(GPU_JAX / "flx_scan")))
    folded = {(_scope(n), d) for n, d in ((n, fold(n)[1]) for n in names)}
    for part in ("attn", "up", "down"):
        scope = f"Model/layers/{part}"
        assert {(scope, FORWARD), (scope, BACKWARD)} <= {
            (s[:len(scope)], d) for s, d in folded}, part


def _code_rows(capture) -> list[tuple[list[str], dict]]:
    """(the names from the root, the row) of every row of the code view's JSON."""
    doc = json.loads(run_cli(["code", capture, "--format", "json", "--no-cache"]).stdout)
    out: list[tuple[list[str], dict]] = []

    def walk(rows, above):
        for r in rows:
            out.append(([*above, r["name"]], r))
            walk(r["children"], [*above, r["name"]])

    walk(doc["rows"], [])
    return out


def test_code_view_leaves_out_runlens_helper_and_repeats():
    """flax_lm's step runs under runlens's own `profiled` (analyzer/capture/jax.py): its
    frame is a library frame; JAX's stacks repeat the user's frames (raw frames show it),
    the code view keeps each once, the innermost user line unchanged; each row's full
    qualified name is in `qualname`, and RL101 names the line by it."""
    import polars as pl

    from runlens.analyzer.analysis.codepaths import is_library_frame
    from runlens.analyzer.load import load_run

    run = load_run(FORMS / "flax_lm", use_cache=False)
    frames = run.code.with_columns(lib=is_library_frame(pl.col("file")))
    helper = frames.filter(pl.col("file").str.ends_with("analyzer/capture/jax.py"))
    assert helper.height and helper["lib"].all()
    user = (frames.filter(~pl.col("lib")).group_by("name")
            .agg(pl.format("{}:{}", "file", "lineno").sort_by("depth").alias("stack")))
    repeats = [s for s in user["stack"].to_list() if len(set(s)) < len(s)]
    assert repeats  # the premise: JAX repeats user frames in one stack
    rows = _code_rows(FORMS / "flax_lm")
    for chain, row in rows:
        assert len(set(chain)) == len(chain), chain
        assert "profiled" not in row["qualname"] and not row["name"].startswith("jax.py")
        assert row["qualname"].split(":")[:2] == row["name"].split(":")[:2]
    cut = [r for _, r in rows if r["name"].endswith("...")]
    assert cut and all(len(r["qualname"]) > len(r["name"]) - 3 and "..." not in r["qualname"]
                       for r in cut)
    # Each raw stack's innermost user frame is the innermost row its op lands on.
    innermost = {f"{s[-1].rsplit('/', 1)[-1]}" for s in user["stack"].to_list()}
    leaves = {":".join(r["qualname"].split(":")[:2]) for chain, r in rows if not r["children"]}
    assert leaves <= innermost
    doc = json.loads(run_cli(["advise", FORMS / "flax_lm", "--format", "json",
                              "--no-cache"]).stdout)
    rl101 = next(f for f in doc["findings"] if f["code"] == "RL101")
    assert "<locals>." in rl101["where"]["code"] and "..." not in rl101["where"]["code"]


# A top-level row no user wrote (issue 32 point 3): an HLO instruction or fusion name, an
# XLA helper, an argument's pytree path, a runtime event, unattributed kernels.
NOT_USERS = re.compile(r"fusion(\.\d+)?$|^wrapped_|\[|^ThenExecuteCallback$|^unattributed"
                       r"|^[a-z][\w-]*\.\d+$|\(inferred\)$")


def _not_users_share(capture) -> tuple[float, list[str]]:
    doc = json.loads(run_cli(["scopes", capture, "--format", "json", "--no-cache",
                              "--max-depth", "1"]).stdout)
    total = sum(r["micros"] for r in doc["rows"])
    bad = [r for r in doc["rows"] if NOT_USERS.search(r["name"])]
    return sum(r["micros"] for r in bad) / total, [r["name"] for r in bad]


@pytest.mark.parametrize("capture", [FORMS / "flax_cnn", GPU_JAX / "cnn_a"],
                         ids=lambda p: p.name)
def test_ops_without_op_name_take_their_neighbours_scope(capture):
    """XLA's helpers (CPU max-pool's wrapped_reduce-window and wrapped_iota, GPU's
    input_transpose_fusion.N, fusions named by a pytree path) land under the user's
    scopes, marked inferred: rows no user wrote hold < 3% of op time (without inference:
    54% on flax_cnn's CPU capture, 3.5% on cnn_a)."""
    if not capture.is_dir():
        pytest.skip(f"no {capture}")
    share, rows = _not_users_share(capture)
    assert share < 0.03, (share, rows)
    inferred = [n for n in _rows(capture) if n.endswith(" (inferred)")]
    assert inferred and all("/" in n for n in inferred)


def test_inferred_scope_is_a_neighbours_in_the_hlo():
    """Each of flax_cnn's max-pool helpers (no op_name in the HLO) takes the scope of an
    instruction it fuses or reads (the module's operand ids, read with protobuf)."""
    from runlens.analyzer.sources.hlo_infer import INFERRED, inferred_metadata, inferred_name

    checked = 0
    for module in hlo_modules(FORMS / "flax_cnn"):
        comps = {c.id: c for c in module.computations}
        inferred = inferred_metadata(module)
        for comp in module.computations:
            by_id = {i.id: i for i in comp.instructions}
            for inst in comp.instructions:
                if not inst.name.startswith("wrapped_reduce-window"):
                    continue
                assert not inst.metadata.op_name  # XLA made it without a name
                near = {by_id[o].metadata.op_name.rsplit("/", 1)[0] for o in inst.operand_ids}
                near |= {i.metadata.op_name.rsplit("/", 1)[0] for x in
                         inst.called_computation_ids for i in comps[x].instructions}
                got = inferred_name(inferred[inst.name], "reduce-window")
                assert got.endswith(INFERRED) and got.rsplit("/", 1)[0] in near
                checked += 1
    assert checked == 2


@pytest.mark.parametrize("capture", ["flax_lm", "plain"])
def test_op_types_are_what_ran_not_jax_wrappers(capture):
    """An instruction JAX named after a wrapper primitive (remat2's copies and transposes,
    closed_call's broadcasts) is typed by what ran; the loop's own `while` stays."""
    doc = json.loads(run_cli(["ops", FORMS / capture, "--format", "json",
                              "--no-cache"]).stdout)
    types = {r["name"] for r in doc["rows"]}
    assert not types & {"remat2", "closed_call", "checkpoint", "pjit", "custom_jvp_call"}
    assert "while" in types and "dot_general" in types

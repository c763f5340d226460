"""One number per fact, and text that shows it (issue 31, points 5 and 6): each step time
computed once and cited alike by summary, the advise header, RL109, the critical path and
RL108; memory peaks named by what they measure and equal where they measure the same; one
spelling of device names; the same input gives the same bytes, cold or from the cache;
names cut in the middle, never two alike; findings' text in human units without unit
keys; compare's warnings printed once.

Expected numbers come from the raw frames (executions, allocation records), not from the
functions under test."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest

from tests.conftest import FIXTURES, ROOT, run_cli

CNN = FIXTURES / "cnn"
CNN_A = ROOT.parent / "shared" / "data" / "gpu-jax" / "cnn_a"
needs_cnn_a = pytest.mark.skipif(not CNN_A.is_dir(), reason="no shared/data/gpu-jax/cnn_a")


def _json(args: list) -> dict:
    return json.loads(run_cli([*args, "--format", "json"]).stdout)


def _raw_step_us(run, worker: str, step: int) -> float:
    """A run dir step's span from its raw executions: first start to last end, all lanes."""
    ex = run.nodes.filter((pl.col("worker") == worker) & (pl.col("step") == step))
    start = int(ex["start_ns"].min())  # type: ignore[arg-type]
    end = int((ex["start_ns"] + ex["all_end_rel_ns"]).max())  # type: ignore[arg-type]
    return (end - start) / 1000.0


def test_bundled_example_prints_one_median_and_one_time_per_step():
    """fixtures/runs/cnn used to say median 3.63ms (header, outlier left out) and 3.67ms
    (RL109, all steps), step 4 3628.2us (summary) and 3.57ms (critical path, RL108)."""
    from runlens.analyzer.load import load_run

    run = load_run(CNN, use_cache=False)
    summary = _json(["summary", CNN])["summary"]
    kept = [r for r in summary["per_step"] if r["analysed"]]
    raw = {r["step"]: _raw_step_us(run, r["worker"], r["step"]) for r in summary["per_step"]}
    for r in summary["per_step"]:
        assert r["duration_us"] == pytest.approx(raw[r["step"]], abs=0.05)
    median = float(np.median([raw[r["step"]] for r in kept]))
    assert summary["step_time_us"]["median"] == pytest.approx(median, abs=0.05)

    advice = _json(["advise", CNN])
    assert advice["median_step_us"] == pytest.approx(median, abs=0.05)
    assert advice["median_over_steps"] == len(kept) == 7
    by_code = {f["code"]: f for f in advice["findings"]}
    assert by_code["RL109"]["evidence"]["median_us"] == pytest.approx(median, abs=0.05)
    path_step = by_code["RL108"]["evidence"]["step"]
    assert by_code["RL108"]["evidence"]["step_us"] == pytest.approx(raw[path_step], abs=0.05)
    path = _json(["graph", CNN, "--critical-path"])
    assert path["step"] == path_step
    assert path["step_us"] == pytest.approx(raw[path_step], abs=0.05)

    # In text, every median and every time of the critical-path step is one number.
    text = run_cli(["advise", CNN]).output + run_cli(["summary", CNN]).output
    medians = set(re.findall(r"median(?: step)? (\d+\.\d+ms)", text))
    assert medians == {f"{median / 1000:.2f}ms"}, medians
    step_text = run_cli(["graph", CNN, "--critical-path"]).output.splitlines()[0]
    assert f"of the step ({raw[path_step] / 1000:.2f}ms)" in step_text


def _rise_peak(allocations: pl.DataFrame, step: int) -> int:
    """The largest bytes allocated since the step began, from the raw allocation records
    (+ allocated, - freed), after each timestamp's records."""
    a = allocations.filter((pl.col("step") == step) & (pl.col("alloc_us") > 0))
    t, v = a["alloc_us"].to_numpy(), a["alloc_bytes"].to_numpy()
    order = np.argsort(t, kind="stable")
    t, level = t[order], np.cumsum(v[order])
    last = np.r_[t[1:] != t[:-1], True]
    return int(level[last].max())


def test_memory_peaks_are_named_and_agree_with_report_and_timeline(tmp_path):
    """RL110 said "peak memory 1.31MB" (the allocator's bytes in use) while the report and
    the timeline drew 1.99MB (bytes allocated since the step began): both are now named,
    and the rise is one number in advise, report and timeline."""
    from runlens.analyzer.analysis.stepselect import StepChoice, analysed
    from runlens.analyzer.load import load_run
    from runlens.analyzer.report.run_data import memory_section

    run = load_run(CNN, use_cache=False)
    chosen = analysed(run, StepChoice())
    finding = next(f for f in _json(["advise", CNN])["findings"] if f["code"] == "RL110")
    top = finding["evidence"]["allocators"][0]
    in_use = int(run.memory["allocator_bytes_in_use"].max())  # type: ignore[arg-type]
    assert top["peak"] == in_use
    rises = {s: _rise_peak(chosen.allocations, s) for s in chosen.steps}
    assert top["in_step_peak"] == max(rises.values())
    assert top["in_step_peak_step"] == min(s for s, r in rises.items() if r == max(rises.values()))
    assert "peak memory in use" in finding["message"]
    assert "allocated within a step" in finding["message"]

    drawn = memory_section(chosen)
    assert max(b for _, b in drawn["series"][0]["points"]) == rises[drawn["step"]]
    out = tmp_path / "t.json"
    run_cli(["timeline", CNN, "--step", str(drawn["step"]), "-o", out])
    counters = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "C"]
    assert max(e["args"]["allocated_since_step_start"] for e in counters) == \
        rises[drawn["step"]]


@needs_cnn_a
def test_device_names_have_one_spelling():
    """RL115 wrote /device:GPU:0 (the device facts' spelling), RL102/112/114
    /device:gpu:0 (the Run's)."""
    text = run_cli(["advise", CNN_A]).output
    assert "/device:gpu:0" in text and "/device:GPU:" not in text
    where = {f["where"].get("device") for f in _json(["advise", CNN_A])["findings"]}
    assert where - {None} == {"/device:gpu:0"}


@needs_cnn_a
def test_step_times_of_an_accelerator_profile_are_named_and_agree():
    """gpu-jax/cnn_a: the header's median is summary's; RL101 and RL102 cite the mean step
    (summary's mean) and the device step's mean under names that say so."""
    summary = _json(["summary", CNN_A])["summary"]
    advice = _json(["advise", CNN_A])
    assert round(advice["median_step_us"], 1) == summary["step_time_us"]["median"]
    by_code = {f["code"]: f["evidence"] for f in advice["findings"]}
    assert round(by_code["RL101"]["mean_step_us"], 1) == summary["step_time_us"]["mean"]
    assert round(by_code["RL102"]["mean_step_us"], 1) == summary["step_time_us"]["mean"]
    assert round(by_code["RL102"]["mean_device_step_us"], 1) == \
        summary["device_step_time_us"]["mean"]


def _outputs(path) -> dict[str, str]:
    """What a user reads of `path`: advise (text, JSON), summary JSON, views."""
    cmds = [["advise"], ["advise", "--format", "json"], ["summary", "--format", "json"],
            ["scopes"], ["scopes", "--format", "json"], ["ops", "--format", "json"]]
    return {" ".join(c): run_cli([c[0], path, *c[1:]]).output for c in cmds}


@pytest.mark.parametrize("path", [CNN, FIXTURES / "gpu_mnist",
                                  FIXTURES.parent / "xplane" / "jax_train",
                                  pytest.param(CNN_A, marks=needs_cnn_a),
                                  pytest.param(CNN_A.parent / "cnn_wide2", marks=needs_cnn_a)],
                         ids=["cnn", "gpu_mnist", "jax_train", "cnn_a", "cnn_wide2"])
def test_same_input_gives_the_same_bytes_cold_or_cached(path, tmp_path, monkeypatch):
    """Two cold runs (each its own empty cache) and a warm one (the second's cache) print
    the same bytes. gpu-jax/cnn_a named RL110's peak step 4 or 6 by run (a tie in an
    unordered group_by), and summary's attribution shares came in any order."""
    seen = []
    for cache in ("a", "b", "b"):
        monkeypatch.setenv("RUNLENS_CACHE_DIR", str(tmp_path / cache))
        seen.append(_outputs(path))
    assert (tmp_path / "b").is_dir()  # the third run read a cache
    for key in seen[0]:
        assert seen[0][key] == seen[1][key], f"{key}: two cold runs differ"
        assert seen[0][key] == seen[2][key], f"{key}: cold and cached differ"


@needs_cnn_a
def test_roofline_ops_of_equal_time_are_listed_by_name():
    """gpu-jax/cnn_wide2: RL115 listed two ops of equal time in either order by run."""
    doc = _json(["advise", CNN_A.parent / "cnn_wide2", "--select", "RL115"])
    ops = [(-o["us_per_step"], o["op"]) for o in doc["findings"][0]["evidence"]["ops"]]
    assert ops == sorted(ops) and len(set(ops)) == len(ops)


def test_cut_names_keep_the_tail_and_never_collide():
    """Names are cut in the middle (Conv2DBackpropFilter and ...Input stay apart), and
    distinct names never print as one cut, at any width."""
    from runlens.analyzer.render.textcut import cut_middle, distinct_cuts

    pair = ["model/block1/conv2_1/convolution/Conv2DBackpropFilter",
            "model/block1/conv2_1/convolution/Conv2DBackpropInput"]
    cut = [cut_middle(n, 30) for n in pair]
    assert len(cut[0]) == 30 and cut[0].endswith("Filter") and cut[1].endswith("Input")
    names = sorted({r["name"] for r in _json(["scopes", CNN, "--max-depth", "20"])["rows"]}
                   | set(pair) | {f"a/{x}/b/c/d/e/f/g/h/i/j/k/l/m" for x in "xyz"})
    for width in range(1, 80):
        cuts = distinct_cuts(names, width)
        assert len(set(cuts)) == len(names), width
        assert all(len(c) <= width or c == n for c, n in zip(cuts, names, strict=True))


def _name_cells(text: str) -> list[str]:
    """The name cell of each row of a view's text: up to the metrics (two spaces)."""
    return [re.match(r"( *\S.*?)(?:  |$)", line).group(1)  # type: ignore[union-attr]
            for line in text.splitlines()[1:] if not line.startswith(("total", "note"))]


def test_scopes_text_fits_columns_and_keeps_names_apart(monkeypatch):
    """COLUMNS narrows the name column; rows of one depth never print the same name."""
    wide = run_cli(["scopes", CNN, "--max-depth", "20"]).stdout
    monkeypatch.setenv("COLUMNS", "120")
    narrow = run_cli(["scopes", CNN, "--max-depth", "20"]).stdout
    head_wide, head_narrow = wide.splitlines()[0], narrow.splitlines()[0]
    assert len(head_narrow) <= 120 < len(head_wide)
    width = head_narrow.index("time") - 2  # the name column, before the first metric
    cells = _name_cells(narrow)
    assert len(cells) == len(set(cells)), "two rows print the same cut name"
    assert sum(len(c) > width for c in cells) <= len(cells) // 20  # few printed in full
    grads = [c.strip() for c in cells if "…" in c and c.endswith(("Filter", "Input"))]
    assert {c[-6:] for c in grads} >= {"Filter", "pInput"}  # the tail that tells them apart


def test_findings_text_has_human_units_under_unit_free_keys():
    """`op_time_us_per_step: 1.05s` read as microseconds: text keys of times lose their
    unit (op_time_per_step), JSON keeps key and raw value; no scientific notation."""
    for name in ("cnn", "fused_cnn", "gpu_mnist"):
        text = run_cli(["advise", FIXTURES / name]).output
        assert not re.search(r"(^|[\s,;])\w*(_us|micros)\w*[:=] ", text), name
        assert not re.search(r"\d[eE][+-]\d", text), name
    doc = _json(["advise", FIXTURES / "fused_cnn"])
    rl101 = next(f for f in doc["findings"] if f["code"] == "RL101")
    assert isinstance(rl101["evidence"]["op_time_us_per_step"], float)
    assert "op_time_per_step: " in run_cli(["advise", FIXTURES / "fused_cnn"]).output


def test_compare_prints_each_warning_once_naming_include_warmup():
    """compare printed its warnings on stdout (in the text) and again on stderr, and
    suggested --keep-outliers where every other command says --include-warmup."""
    result = run_cli(["compare", CNN, CNN])
    both = result.stdout + result.stderr
    lines = [ln for ln in both.splitlines() if "left out" in ln]
    assert lines and len(lines) == len({ln.split("warning: ")[-1] for ln in lines})
    assert "--include-warmup keeps them" in lines[0] and "--keep-outliers" not in both
    quiet = run_cli(["compare", CNN, CNN, "--format", "json"])
    assert "left out" in quiet.stderr  # JSON on stdout: said on stderr, once
    assert "--include-warmup" in run_cli(["compare", "--help"]).output


def test_a_runs_warning_is_printed_once(tmp_path):
    """summary printed a damaged part's warning on stderr (when loading) and again in its
    text; now once. Two run dirs, one step file of the second cut short."""
    import shutil

    for worker in ("w0", "w1"):
        shutil.copytree(CNN, tmp_path / worker)
    step = sorted((tmp_path / "w1" / "steps").iterdir())[0]
    step.write_bytes(step.read_bytes()[:7])
    result = run_cli(["summary", tmp_path, "--no-cache"])
    both = result.stdout + result.stderr
    assert both.count(f"{step.name}: truncated") == 1, both


@pytest.mark.parametrize("path", [CNN, FIXTURES.parent / "xplane" / "jax_train"],
                         ids=["cnn", "jax_train"])
def test_timeline_draws_each_step_for_the_time_summary_gives(path, tmp_path):
    """The timeline drew an XSpace step from its first op to its last (jax_train step 0:
    111us) where summary gives the step marker's span (750.9us): one time per step."""
    per_step = {r["step"]: r["duration_us"]
                for r in _json(["summary", path])["summary"]["per_step"]}
    out = tmp_path / "t.json"
    run_cli(["timeline", path, "--all-steps", "-o", out])
    slices = {e["args"]["step"]: e["dur"] for e in json.loads(out.read_text())["traceEvents"]
              if e.get("cat") == "Step"}
    assert slices.keys() == per_step.keys()
    for step, dur in slices.items():
        assert abs(dur - per_step[step]) <= 1.0, (step, dur, per_step[step])

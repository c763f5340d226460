"""Baseline files: a run's per-step samples as a small JSON file, saved and validated.

A baseline decides whether CI fails, so a damaged one must never quietly turn the gate
off (a NaN median compares false with everything: "result: OK" on a regressed run).
`load_baseline` therefore checks the whole document against its schema (1: one run, 2:
several runs kept apart) before using it and refuses anything else with one line naming
the file: wrong types, NaN/Infinity, numbers out of range, empty metric lists, no step
time, deep nesting, unknown versions, sample ids that name no run.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import InputFileError
from ..readfile import read_bytes, shown
from ..rundir import atomic_write
from .baseruns import run_sources
from .samples import Samples
from .workdiff import WORK_SCHEMA

BASELINE_KIND = "runlens-baseline"
BASELINE_SCHEMA = 1  # one run
MULTI_RUN_SCHEMA = 2  # several runs kept apart (analyzer.gate.baseruns): "runs", "i#" sample ids
SCHEMAS = (BASELINE_SCHEMA, MULTI_RUN_SCHEMA)
KINDS = ("step", "op", "scope")
MAX_US = 1e12  # 11.6 days per step: anything above is not a timing
MAX_SCOPE_DEPTH = 64
MAX_WORK = 1e18  # bytes, float ops, parameters per step: anything above is not a count
WORK_FIELDS = list(WORK_SCHEMA)[1:]  # node_work values: [op type, executions, ...]


def save_baseline(samples: Samples, path: Path) -> None:
    """Write `samples` (analyzer.gate.samples.Samples) as a baseline, atomically: schema 1
    for one run, schema 2 when it holds several runs (each run's node medians apart)."""
    wide = samples.samples.group_by("kind", "name").agg(
        pl.col("value_us").sort_by("sample").round(3))
    runs = run_sources(samples)
    doc = {
        "format": BASELINE_KIND,
        "schema": MULTI_RUN_SCHEMA if runs else BASELINE_SCHEMA,
        "source": samples.source,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "scope_depth": samples.scope_depth,
        "meta": samples.meta,
        "samples": samples.samples.select("sample").unique().sort("sample")["sample"].to_list(),
        "metrics": [{"kind": k, "name": nm, "values_us": v}
                    for k, nm, v in wide.sort("kind", "name").iter_rows()],
    }
    medians = samples.node_medians.with_columns(pl.col("median_us").round(3))

    def nodes(m: pl.DataFrame) -> dict[str, Any]:  # op types: machinefactor's op classes
        out = {"node_medians_us": dict(m.select("name", "median_us").iter_rows())}
        if "op_type" in m.columns:
            out["node_op_types"] = dict(m.select("name", "op_type").drop_nulls().iter_rows())
        return out

    if runs:
        doc["runs"] = [{"source": src, **nodes(medians.filter(pl.col("run") == i))}
                       for i, src in enumerate(runs)]
    else:
        doc.update(nodes(medians))
    if samples.work is not None:  # what each node does (analyzer.gate.workdiff)
        doc["node_work"] = {r[0]: [r[1], *(_count(v) for v in r[2:])]
                            for r in samples.work.iter_rows()}
    atomic_write(path, (json.dumps(doc, indent=0, allow_nan=False) + "\n").encode())


def _count(v: float | None) -> float | int | None:
    """A count as JSON writes it shortest (1 rather than 1.0)."""
    return int(v) if v is not None and float(v).is_integer() else v


class _Bad(Exception):
    pass


def _reject_constant(token: str) -> float:
    raise _Bad(f"{token} is not a number a baseline may hold")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{where} must be a number, not {type(value).__name__}")
    try:
        f = float(value)
    except OverflowError:
        raise _Bad(f"{where} is out of range") from None
    if not math.isfinite(f) or not 0.0 <= f <= MAX_US:
        raise _Bad(f"{where} = {value!r} is not a time in microseconds (0..{MAX_US:g})")
    return f


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad(f"{where} must be a non-empty string, not {value!r:.40}")
    return value


def _node_medians(medians: Any, where: str, op_types: Any = None
                  ) -> list[tuple[str, float, str | None]]:
    """(node, median us, op type or None); op types are optional (older baselines)."""
    if not isinstance(medians, dict):
        raise _Bad(f"{where} must be an object of node name -> microseconds")
    ops = {} if op_types is None else op_types
    if not isinstance(ops, dict):
        raise _Bad(f"{where.replace('node_medians_us', 'node_op_types')} must be an object "
                   "of node name -> op type")
    return [(_string(k, f"{where} key"), _number(v, f"{where}[{k!r:.40}]"),
             None if ops.get(k) is None else _string(ops[k], f"op type of {k!r:.40}"))
            for k, v in medians.items()]


def _work(work: Any) -> pl.DataFrame | None:
    """node_work: name -> [op type, executions, output bytes, input bytes, float ops,
    parameters] (null where the source did not hold it); None when absent (saved before
    work was kept: compare then judges without it)."""
    if work is None:
        return None
    if not isinstance(work, dict):
        raise _Bad("node_work must be an object of node name -> work facts")
    rows = []
    for name, facts in work.items():
        where = f"node_work[{name!r:.40}]"
        if not isinstance(facts, list) or len(facts) != len(WORK_FIELDS):
            raise _Bad(f"{where} must be a list of {len(WORK_FIELDS)} values "
                       f"({', '.join(WORK_FIELDS)})")
        op, numbers = facts[0], facts[1:]
        if op is not None:
            _string(op, f"{where}[0]")
        for j, v in enumerate(numbers, 1):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not math.isfinite(v) or not 0 <= v <= MAX_WORK):
                raise _Bad(f"{where}[{j}] = {v!r:.40} is not a count (0..{MAX_WORK:g})")
        rows.append((name, op, *(None if v is None else float(v) for v in numbers)))
    return pl.DataFrame(rows, schema=WORK_SCHEMA, orient="row")


def _runs(doc: dict[str, Any], ids: list[str]) -> tuple[list[str], list[Any]]:
    """Schema 2: the runs' sources and node medians; every sample id names one run."""
    runs = doc.get("runs")
    if not isinstance(runs, list) or len(runs) < 2:
        raise _Bad("runs must be a list of at least two runs (schema 2)")
    sources, medians = [], []
    for i, r in enumerate(runs):
        if not isinstance(r, dict):
            raise _Bad(f"runs[{i}] must be an object")
        sources.append(_string(r.get("source"), f"runs[{i}].source"))
        medians += [(k, v, op, i) for k, v, op in _node_medians(
            r.get("node_medians_us", {}), f"runs[{i}].node_medians_us", r.get("node_op_types"))]
    seen: set[int] = set()
    for s in ids:
        head, sep, _ = s.partition("#")
        if not sep or not head.isdigit() or int(head) >= len(runs):
            raise _Bad(f"sample {s!r:.40} does not name one of the {len(runs)} runs "
                       "(RUN#worker/step)")
        seen.add(int(head))
    if len(seen) != len(runs):
        raise _Bad(f"runs[{min(set(range(len(runs))) - seen)}] has no samples")
    return sources, medians


def _validate(doc: Any) -> tuple[list[tuple[str, str, str, float]], list[Any],
                                 int, dict[str, Any], pl.DataFrame | None]:
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_KIND:
        raise _Bad("not a runlens baseline (save one with `analyze baseline save RUN -o FILE`)")
    schema = doc.get("schema")
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise _Bad(f"schema must be an integer, not {schema!r:.40}")
    if schema not in SCHEMAS:
        hint = "upgrade runlens" if schema > max(SCHEMAS) else "save it again"
        raise _Bad(f"baseline schema {schema} is not a schema this runlens reads "
                   f"({', '.join(map(str, SCHEMAS))}); {hint}")
    depth = doc.get("scope_depth", 3)
    if isinstance(depth, bool) or not isinstance(depth, int) \
            or not 1 <= depth <= MAX_SCOPE_DEPTH:
        raise _Bad(f"scope_depth must be an integer 1..{MAX_SCOPE_DEPTH}, not {depth!r:.40}")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise _Bad("meta must be an object")
    ids = doc.get("samples")
    if not isinstance(ids, list) or not ids:
        raise _Bad("samples must be a non-empty list of step ids")
    ids = [_string(s, f"samples[{i}]") for i, s in enumerate(ids)]
    if len(set(ids)) != len(ids):
        raise _Bad("samples holds the same step id twice")
    metrics = doc.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        raise _Bad("metrics must be a non-empty list")
    rows: list[tuple[str, str, str, float]] = []
    seen: set[tuple[str, str]] = set()
    for i, m in enumerate(metrics):
        if not isinstance(m, dict):
            raise _Bad(f"metrics[{i}] must be an object")
        kind = m.get("kind")
        if kind not in KINDS:
            raise _Bad(f"metrics[{i}].kind must be one of {', '.join(KINDS)}, "
                       f"not {kind!r:.40}")
        name = _string(m.get("name"), f"metrics[{i}].name")
        if (kind, name) in seen:
            raise _Bad(f"metrics[{i}]: {kind} {name!r:.60} appears twice")
        seen.add((kind, name))
        values = m.get("values_us")
        if not isinstance(values, list) or len(values) != len(ids):
            raise _Bad(f"metrics[{i}].values_us must be a list of {len(ids)} numbers "
                       "(one per sample)")
        rows += [(kind, name, ids[j], _number(v, f"metrics[{i}].values_us[{j}]"))
                 for j, v in enumerate(values)]
    if ("step", "step time") not in seen:
        raise _Bad("no step time metric")
    work = _work(doc.get("node_work"))
    if schema == MULTI_RUN_SCHEMA:
        sources, medians = _runs(doc, ids)
        return rows, medians, depth, {**meta, "runs": sources}, work
    one_run = {k: v for k, v in meta.items() if k != "runs"}  # "runs" means schema 2
    return rows, _node_medians(doc.get("node_medians_us", {}), "node_medians_us",
                               doc.get("node_op_types")), depth, one_run, work


BASELINE_MAX_BYTES = 256 << 20


def load_baseline(path: Path) -> Samples:
    """Read and validate a baseline file into analyzer.gate.samples.Samples."""
    name = shown(path)  # the file as displayed (a name in any bytes as \xNN)
    try:  # a regular file only, at most 256 MiB (a baseline is kilobytes)
        text = read_bytes(path, BASELINE_MAX_BYTES, what="baseline").decode()
    except UnicodeDecodeError as e:
        raise InputFileError(f"{name}: not a readable baseline file ({e})") from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except _Bad as e:
        raise InputFileError(f"{name}: invalid baseline: {e}") from None
    except RecursionError:
        raise InputFileError(f"{name}: not a readable baseline file (nested too deeply)"
                             ) from None
    except ValueError as e:
        raise InputFileError(f"{name}: not a readable baseline file ({e})") from None
    try:
        rows, medians, depth, meta, work = _validate(doc)
    except _Bad as e:
        raise InputFileError(f"{name}: invalid baseline: {e}") from None
    long = pl.DataFrame(rows, schema={"kind": pl.String, "name": pl.String,
                                      "sample": pl.String, "value_us": pl.Float64},
                        orient="row")
    columns = {"name": pl.String, "median_us": pl.Float64, "op_type": pl.String}
    if "runs" in meta:  # schema 2: each run's node medians apart
        columns["run"] = pl.Int64
    nm = pl.DataFrame(medians, schema=columns, orient="row")
    if nm["op_type"].null_count() == nm.height:  # a baseline saved before op types
        nm = nm.drop("op_type")
    return Samples(name, long, nm, depth, meta, work)

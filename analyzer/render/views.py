"""Render views: a tfprof-style text table or tree, JSON (schema 1) or CSV; tree views
also as flame-graph files (speedscope JSON, gzipped pprof)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from ..analysis.views import ALL_METRICS, PASS_METRICS, TREE_KINDS, View, tree_metrics
from ..units import fmt_bytes, fmt_count, fmt_us
from .textcut import MIN_NAME, distinct_cuts, text_columns

SCHEMA = 1
NAME_WIDTH = 90  # the name column's width at most when output is piped (no COLUMNS)
# select name -> (metric column, formatter, header)
COLUMNS = {
    "micros": ("micros", fmt_us, "time"),
    "accelerator_micros": ("accelerator_micros", fmt_us, "accel time"),
    "cpu_micros": ("cpu_micros", fmt_us, "cpu time"),
    "bytes": ("requested_bytes", fmt_bytes, "requested"),
    "peak_bytes": ("peak_bytes", fmt_bytes, "peak"),
    "residual_bytes": ("residual_bytes", fmt_bytes, "residual"),
    "output_bytes": ("output_bytes", fmt_bytes, "output"),
    "params": ("params", fmt_count, "params"),
    "float_ops": ("float_ops", fmt_count, "flops"),
    "occurrence": ("occurrence", fmt_count, "runs"),
}



def _number(value: Any) -> int | float:
    """A metric as JSON: counts and bytes whole; times of XSpace profiles (float
    microseconds, exact to the nanosecond: docs/xplane.md) to the nanosecond, not cut to
    whole microseconds; whole times stay whole."""
    if isinstance(value, float) and not value.is_integer():
        return round(value, 3)
    return int(value)


def _metrics(row: dict[str, Any]) -> dict[str, int | float]:
    return {m: _number(row[m]) for m in ALL_METRICS}


def view_json(view: View) -> str:
    return json.dumps(view_doc(view), indent=1)


def view_doc(view: View) -> dict[str, Any]:
    """The JSON document of a view (schema 1), as a dict: what `--format json` prints and
    the HTML report embeds."""
    if view.kind in TREE_KINDS:
        rows = [_tree_row(r) for r in view.tree()]
    else:
        rows = [{"name": r["name"], **_metrics(r), **_extra(view.kind, r)}
                for r in view.rows.iter_rows(named=True)]
    where = {"workers": view.where.get("workers", []), "devices": view.where.get("devices", [])}
    # Every row says the worker and the device it covers, or that it sums several.
    said = {"worker": _said(where["workers"], "worker"),
            "device": _said(where["devices"], "device")}
    rows = [_with(said, r) for r in rows]
    return {
        "schema": SCHEMA,
        "view": view.kind,
        "step": view.options.step,
        "options": {k: list(v) if isinstance(v, tuple) else v
                    for k, v in view.options.__dict__.items()},
        **where,
        "total": view.root,
        "rows": rows,
        "notes": view.notes,
    }


def _extra(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    if kind == "ops":
        return {"nodes": row["nodes"], "kernels": row["kernels"], "op_types": row["op_types"]}
    if kind == "graph":
        return {"op_type": row["op_type"], "kernel": row["kernel"],
                "fused_ops": row["fused_ops"], "device": row["device"], "inputs": row["inputs"]}
    return {}


def _tree_row(node: dict[str, Any]) -> dict[str, Any]:
    kernel = {k: node[k] for k in ("kernel", "fused_ops") if node.get("kernel")}
    passes = {m: _number(node[m]) for m in PASS_METRICS if m in node}  # JAX: fwd/bwd time
    return {
        "name": node["name"],
        **({"qualname": node["qualname"]} if "qualname" in node else {}),  # code: uncut
        **kernel,
        **_metrics(node),
        **passes,
        "self": {m: _number(node[f"self_{m}"]) for m in ALL_METRICS},
        "children": [_tree_row(c) for c in node["children"]],
    }


def view_csv(view: View) -> str:
    out = io.StringIO()
    tree = view.kind in TREE_KINDS
    metrics = tree_metrics(view.rows) if tree else ALL_METRICS
    header = ["name", *(["depth", "parent"] if tree else []), *metrics]
    if tree:
        header += [f"self_{m}" for m in metrics]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    names = dict(zip(view.rows["key"].to_list(), view.rows["name"].to_list(), strict=True))
    for r in view.rows.iter_rows(named=True):
        row = {**r, "parent": names.get(r["parent"], "") if r["parent"] else ""}
        writer.writerow([row[h] for h in header])
    return out.getvalue()


def _kernel_note(view: View, row: dict[str, Any]) -> str:
    """Graph and scope views: " [_FusedConv2D: Conv2D+BiasAdd+Relu]" after a node that ran
    as another kernel than its graph op type (with op_types "kernel")."""
    if view.kind not in ("graph", "scopes") or view.options.op_types != "kernel":
        return ""
    if not row.get("kernel") or (row["kernel"] == row.get("op_type") and not row["fused_ops"]):
        return ""
    fused = f": {row['fused_ops']}" if row["fused_ops"] else ""
    return f" [{row['kernel']}{fused}]"


def view_text(view: View) -> str:
    select = [s for s in view.options.select if s in COLUMNS] or ["micros"]
    cols = [COLUMNS[s] for s in select]
    by_kernel = view.options.op_types == "kernel"
    title = {"ops": "kernel" if by_kernel else "op type", "scopes": "name scope",
             "graph": "graph node", "code": "python code"}[view.kind]
    tree = view.kind in TREE_KINDS
    lines: list[str] = []
    rows = list(view.rows.iter_rows(named=True))
    depths = [int(r["depth"]) - 1 if tree else 0 for r in rows]
    names = [str(r["name"]) + _kernel_note(view, r) for r in rows]
    passes = _has_passes(view)
    rest = len(cols) * 28 + (24 if passes else 0)  # the metric cells after the name
    width = _name_width(max([len(title)] + [2 * d + len(n) for d, n in zip(
        depths, names, strict=True)]), rest)
    label_rows = list(zip(_labels(names, depths, width), rows, strict=True))
    head = f"{title:<{width}}"
    for _, _, name in cols:
        head += f"  {name + (' (total/self)' if tree else ''):>26}"
    if passes:
        head += f"  {'forward/backward':>22}"
    lines.append(head)
    for text, r in label_rows:
        line = f"{text:<{width}}"
        for metric, fmt, _ in cols:
            total = view.root.get(metric) or 0
            share = f"{100 * r[metric] / total:5.1f}%" if total else "     -"
            if tree:
                cell = f"{fmt(r[metric])}/{fmt(r['self_' + metric])} {share}"
            else:
                cell = f"{fmt(r[metric])} {share}"
            line += f"  {cell:>26}"
        if passes:
            line += f"  {_passes_cell(r):>22}"
        lines.append(line)
    totals = "  ".join(f"{name} {fmt(view.root[m])}" for m, fmt, name in cols)
    step = "average over steps" if view.options.step < 0 else f"step {view.options.step}"
    lines.append(f"total ({step}): {totals}; {len(label_rows)} rows")
    lines.extend(f"note: {n}" for n in view.notes)
    return "\n".join(lines) + "\n"


def _name_width(longest: int, rest: int) -> int:
    """The name column: as wide as the longest label, at most what the terminal leaves
    beside the metric cells (`COLUMNS`), or NAME_WIDTH when output is piped."""
    columns = text_columns()
    room = NAME_WIDTH if columns is None else max(MIN_NAME, columns - rest)
    return min(longest, room)


def _labels(names: list[str], depths: list[int], width: int) -> list[str]:
    """Each row's label (indented by depth) in `width` characters: names cut in the
    middle, never two distinct names of one depth to the same cut."""
    out = [""] * len(names)
    for depth in sorted(set(depths)):
        at = [i for i, d in enumerate(depths) if d == depth]
        room = max(width - 2 * depth, MIN_NAME // 2)
        for i, cut in zip(at, distinct_cuts([names[i] for i in at], room), strict=True):
            out[i] = "  " * depth + cut
    return out


def _has_passes(view: View) -> bool:
    """A scope view of JAX ops folded from forward and backward passes."""
    return ("backward_micros" in view.rows.columns
            and bool((view.rows.get_column("backward_micros") > 0).any()))


def _passes_cell(row: dict[str, Any]) -> str:
    """`1.20ms/2.51ms`: the row's time in the forward and in the backward pass (the rest,
    an optimizer's update say, is in neither)."""
    fwd, bwd = row["forward_micros"], row["backward_micros"]
    return "-" if not (fwd or bwd) else f"{fmt_us(fwd)}/{fmt_us(bwd)}"


def _said(values: list[str], what: str) -> str | None:
    """The one value, or "summed over N <what>s"; None for a view of nothing."""
    if not values:
        return None
    return values[0] if len(values) == 1 else f"summed over {len(values)} {what}s"


def _with(said: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """A row (and its children) with the worker and device it covers, before its own."""
    out = {**said, **row}
    if "children" in row:
        out["children"] = [_with(said, c) for c in row["children"]]
    return out

"""Assemble one self-contained HTML page: inline style, ECharts, the data, our script.

Text (the glance, notes, tables, findings) is written here as HTML, so it reads even
where scripts do not run; charts are drawn by report.js from the embedded JSON
(`<script type="application/json" id="runlens-data">`). Nothing is loaded from the
network: no external script, style, font or image.
"""

from __future__ import annotations

import json
from functools import cache
from html import escape
from importlib import resources
from typing import Any

from ..units import fmt_bytes, fmt_us

SEVERITY_ORDER = ("error", "warning", "info")


@cache
def asset(name: str) -> str:
    """A file of this package (report.js, report.css, vendor/echarts.min.js)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: '<' is escaped, so no '</script>' or '<!--'
    in a name (a scope, a file path) can end the element early."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029",
                                                                           "\\u2029")


def page(title: str, body: str, data: dict[str, Any]) -> str:
    return "".join([
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        # No request may leave the page: the browser blocks any that a bug would make.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{escape(title)}</title><style>{asset('report.css')}</style></head><body>",
        body,
        f"<script>{asset('vendor/echarts.min.js')}</script>",
        f"<script type=\"application/json\" id=\"runlens-data\">{embed_json(data)}</script>",
        f"<script>{asset('report.js')}</script>",
        "</body></html>\n",
    ])


def section(key: str, title: str, data: dict[str, Any] | None, intro: str = "",
            chart: bool = True, extra: str = "") -> str:
    """A section: its title, one line when the source lacks its data, else an intro, a
    chart container (drawn by report.js) and any extra HTML."""
    head = f"<section id=\"{key}\"><h2>{escape(title)}</h2>"
    if data is not None and data.get("missing"):
        return head + f"<p class=\"missing\">{escape(data['missing'])}</p></section>"
    body = f"<p class=\"intro\">{intro}</p>" if intro else ""
    if chart:
        body += f"<div class=\"chart\" id=\"chart-{key}\" data-chart=\"{key}\"></div>"
    return head + body + extra + "</section>"


def glance_html(g: dict[str, Any]) -> str:
    t = g["step_time_us"]
    host = " (host marker)" if g.get("step_time_kind") == "marker" else ""
    cells = [
        ("steps", str(g["steps"])), ("workers", str(len(g["workers"]))),
        ("devices", str(len(g["devices"]))),
        ("median step" + host, fmt_us(t["median"])), ("p90 step" + host, fmt_us(t["p90"])),
        ("node stats", f"{g['node_stats']:,}"),
    ]
    if dev := g.get("device_step_time_us"):  # accelerator profiles: xprof's step time
        cells.insert(5, ("median device step", fmt_us(dev["median"])))
    tiles = "".join(f"<div class=\"tile\"><div class=\"v\">{escape(v)}</div>"
                    f"<div class=\"k\">{escape(k)}</div></div>" for k, v in cells)
    devices = ", ".join(escape(d) for d in g["devices"])
    note = g.get("attribution_note")
    return (f"<div class=\"tiles\">{tiles}</div>"
            f"<p class=\"lead\">{escape(g['where_time_goes'])}</p>"
            + (f"<p class=\"small\">{escape(note)}</p>" if note else "")
            + _collectives_html(g.get("collectives"))
            + f"<p class=\"small\">devices: {devices}</p>")


def _collectives_html(c: dict[str, Any] | None) -> str:
    """The collectives' line (analysis.collectives.summary): time, wait for peers."""
    if not c:
        return ""
    over = c["summed_over_devices"]
    return (f"<p class=\"small\">collectives: {escape(fmt_us(c['collective_us']))} a step "
            f"(median), of which waiting for peers {escape(fmt_us(c['collective_wait_us']))}"
            f" ({c['wait_share'] * 100:.1f}%)"
            + (f", summed over {over} devices" if over > 1 else "") + "</p>")


def findings_html(findings: list[dict[str, Any]]) -> str:
    if not findings:
        return "<p>No findings: nothing the checkers know about stands out.</p>"
    rows = []
    for f in findings:
        where = ", ".join(f"{k}={v}" for k, v in f["where"].items() if v is not None)
        evidence = "; ".join(f"{k}: {_compact(v)}" for k, v in f["evidence"].items())
        rows.append(
            f"<tr class=\"sev-{escape(f['severity'])}\"><td><span class=\"badge\">"
            f"{escape(f['severity'])}</span></td>"
            f"<td>{escape(f['code'])}<br><span class=\"small\">{escape(f['name'])}</span></td>"
            f"<td class=\"num\">{100 * f['impact']:.1f}%</td>"
            f"<td>{escape(f['message'])}"
            + (f"<div class=\"small\">where: {escape(where)}</div>" if where else "")
            + f"<details><summary>evidence</summary><div class=\"small\">{escape(evidence)}"
            f"</div></details></td><td>{escape(f['suggestion'])}</td></tr>")
    return ("<table class=\"findings\"><thead><tr><th>severity</th><th>checker</th>"
            "<th>impact</th><th>finding and evidence</th><th>fix</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _compact(value: Any) -> str:
    if isinstance(value, list):
        text = "; ".join(_compact(v) for v in value[:5])
        return text + (f"; ... ({len(value)} in all)" if len(value) > 5 else "")
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def run_body(d: dict[str, Any]) -> str:
    g = d["glance"]
    cp = d["critical_path"]
    cp_intro = "" if cp.get("missing") else escape(
        f"Step {cp['step']} ({cp['worker']}), the median step: {cp['ops_total']} ops in a "
        f"chain, {fmt_us(cp['length_us'])} of op time = {100 * cp['share']:.0f}% of the "
        f"step ({fmt_us(cp['step_us'])}). Bars: each op's time; the gap before a bar is "
        "time waited for no input." + (f" The {len(cp['ops'])} longest ops are drawn."
                                       if len(cp["ops"]) < cp["ops_total"] else ""))
    mem = d["memory"]
    mem_intro = "" if mem.get("missing") else escape(
        f"Bytes allocated per allocator since step {mem['step']} (the median step) "
        "began, from the allocation records: the rise above what was in use when the step "
        "began, not the allocator's bytes in use; peaks: " + ", ".join(
            f"{s['allocator']} {fmt_bytes(max(b for _, b in s['points']))}"
            for s in mem["series"]) + ".")
    n_findings = len(d["findings"])
    return "".join([
        f"<header><h1>runlens report</h1><p class=\"small\">{escape(d['source'])}</p></header>",
        "<section id=\"glance\"><h2>The run at a glance</h2>" + glance_html(g) + "</section>",
        section("steps", "Step time across steps", d["steps"],
                "Each traced step's time per worker; warm-up steps and outliers are "
                "marked, the line is the median."),
        section("ops", "Time by op type", d["ops"],
                "Total time of each op type per step (average over steps), largest first; "
                "the same rows as <code>analyze ops --format json</code>.",
                extra="<p class=\"intro\">The same time as a treemap: click an op type to "
                      "drill down to its nodes, the path above it to go back up.</p>"
                      "<div class=\"chart\" id=\"chart-op_nodes\" "
                      "data-chart=\"op_nodes\"></div>"),
        section("scopes", "Time by name scope", d["scopes"],
                "Click a scope to drill down, the centre to go back up; a ring's gap is "
                "time the scope spends in its own ops."),
        section("code", "Python code (flame graph)", d["code"],
                "Call stacks from the op log's code traces, outermost at the top; width is "
                "time. Click a frame to zoom in, the top bar to zoom out."),
        section("critical_path", "Critical path of the median step", cp, cp_intro),
        section("memory", "Memory over time", mem, mem_intro),
        section("findings", f"Advisor findings ({n_findings})", None, chart=False,
                extra=findings_html(d["findings"])),
        "<footer class=\"small\">runlens: every number here is also in "
        "<code>analyze summary|ops|scopes|code|graph --critical-path|advise</code>."
        "</footer>",
    ])


def compare_body(d: dict[str, Any]) -> str:
    status = (f"{d['regressions']} regression(s)" if d["regressions"] else "no regression")
    if d.get("watches"):
        status += f", {d['watches']} WATCH line(s)"
    step = d["step"]
    lead = ""
    if step and step["base_median_us"] is not None and step["new_median_us"] is not None:
        lead = (f"Median step {fmt_us(step['base_median_us'])} → "
                f"{fmt_us(step['new_median_us'])} ({_change(step)}).")
    warnings = "".join(f"<p class=\"warning\">{escape(w)}</p>" for w in d["warnings"])
    excluded = "; ".join(f"{side}: {', '.join(map(str, steps))}"
                         for side, steps in d["excluded"].items() if steps)
    if excluded:
        warnings += f"<p class=\"small\">warm-up steps left out: {escape(excluded)}</p>"
    head = (f"<header><h1>runlens comparison: <span class=\"{'bad' if d['regressions'] else 'good'}"
            f"\">{escape(status)}</span></h1>"
            f"<p class=\"small\">base {escape(d['base'])}<br>new {escape(d['new'])}</p>"
            f"<p class=\"lead\">{escape(lead)}</p>"
            f"<p class=\"small\">{escape(d['method'])}, alpha {d['alpha']}, threshold "
            f"{d['threshold_pct']:g}%, machine-wide factor {d['machine_factor']:.3f} "
            f"({d['machine_factor_nodes']} nodes) divided out.</p>{warnings}</header>")
    return "".join([
        head,
        section("distributions", "Step time: base and new", None,
                "Each dot is a traced step; boxes span the quartiles, whiskers the range."),
        section("moved", "Regressions, WATCH lines and improvements", None, chart=False,
                extra=moved_html(d["moved"])),
        section("scopes_moved", "Scopes that moved", None if d["scopes"] else
                {"missing": "No name scopes to compare."},
                "Change of each scope's time (normalized); regressions in red, improvements "
                "in green, unchanged in grey; whiskers: confidence interval where given."),
    ])


def _change(r: dict[str, Any]) -> str:
    if r["verdict"] in ("new", "vanished"):
        return r["verdict"]
    if r["change_pct"] is None:
        return "-"
    text = f"{r['change_pct']:+.1f}%"
    if r["ci_pct"]:
        text += f" [{r['ci_pct'][0]:+.1f}%, {r['ci_pct'][1]:+.1f}%]"
    return text


def _numbers(r: dict[str, Any]) -> str:
    """Raw medians and change, then the normalized median with its factor and source."""
    base = "-" if r["base_median_us"] is None else fmt_us(r["base_median_us"])
    new = "-" if r["new_median_us"] is None else fmt_us(r["new_median_us"])
    raw = f"{base} → {new}"
    if r.get("raw_change_pct") is not None:
        raw += f" ({r['raw_change_pct']:+.1f}%)"
    if r.get("factor") is None or r.get("normalized_median_us") is None:
        return escape(raw)
    norm = r.get("normalized_change_pct")
    return (f"{escape(raw)}<br><span class=\"small\">normalized "
            f"{fmt_us(r['normalized_median_us'])}"
            f"{'' if norm is None else f' ({norm:+.1f}%)'}, "
            f"factor {r['factor']:.3f} from {escape(r.get('factor_from') or '')}</span>")


def moved_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>No significant change above the threshold.</p>"
    out = []
    for r in rows:
        p = "" if r["p_value"] is None or r["verdict"] not in ("regression", "watch",
                                                               "improvement") \
            else f"{r['p_value']:.2g}"
        why = "".join(f"<br><span class=\"small\">{escape(label)}: {escape(r[key])}</span>"
                      for key, label in (("work", "work"), ("rule", "rule")) if r.get(key))
        out.append(f"<tr class=\"v-{escape(r['verdict'])}\"><td>{escape(r['verdict'])}</td>"
                   f"<td>{escape(r['kind'])}</td><td class=\"name\">{escape(r['name'])}{why}</td>"
                   f"<td class=\"num\">{_numbers(r)}</td>"
                   f"<td class=\"num\">{escape(_change(r))}</td><td class=\"num\">{p}</td></tr>")
    return ("<table class=\"moved\"><thead><tr><th>verdict</th><th>kind</th><th>name</th>"
            "<th>median base → new (raw; normalized)</th><th>effect [95% CI]</th>"
            "<th>p (adj.)</th></tr></thead><tbody>" + "".join(out) + "</tbody></table>")

"""Rendering of `analyze summary`: text, or JSON (a schema number around the summary)."""

from __future__ import annotations

import json

from ..readfile import shown
from ..units import fmt_us, lacks_by_reason

# 2: summary.devices[] is one entry per (worker, device) (was per device, workers pooled)
# with device_step_us, busy_us, idle_share, collective_us, collective_wait_us, modules,
# steps_with_work and steps besides node_stats and nodes (docs/xplane.md "Devices").
SCHEMA = 2


def summary_text(s: dict) -> str:
    t = s["step_time_us"]
    lines = [
        f"run        {', '.join(shown(p) for p in s['paths'])}",
        f"workers    {len(s['workers'])} ({', '.join(s['workers'])})",
        f"steps      {len(s['steps'])} ({_ranges(s['steps'])})",
        f"node stats {s['node_stats']:,} ({s['distinct_nodes']:,} distinct nodes, "
        f"{s['op_types']} op types)",
        "devices    (each its own: medians over the steps it worked in; device step: "
        "first to last event of its work in the step)",
        *_device_table(s["devices"]),
        *_device_notes(s["devices"], _step_median(s)),
    ]
    lines.append(
        f"step time  median {fmt_us(t['median'])}  mean {fmt_us(t['mean'])}  "
        f"p90 {fmt_us(t['p90'])}  min {fmt_us(t['min'])}  max {fmt_us(t['max'])}  "
        f"stdev {fmt_us(t['stdev'])}"
        + (f"  (over {t['count']} steps)" if s.get("left_out") else "")
        + _KIND_SAID.get(s.get("step_time_kind", ""), "")
    )
    if dev := s.get("device_step_time_us"):
        lines.append(
            f"device     median {fmt_us(dev['median'])}  mean {fmt_us(dev['mean'])}  "
            f"p90 {fmt_us(dev['p90'])}  min {fmt_us(dev['min'])}  max {fmt_us(dev['max'])}"
            "  (device step: first to last event of the step's work on the device whose "
            "work spans longest, as xprof's step db; each device's own: devices above)")
    if comm := s.get("collectives"):
        kinds = ", ".join(f"{k} {fmt_us(v)}" for k, v in comm["by_kind_us"].items())
        over = comm["summed_over_devices"]
        lines.append(
            f"collective median {fmt_us(comm['collective_us'])} a step, of which waiting "
            f"for peers {fmt_us(comm['collective_wait_us'])} "
            f"({comm['wait_share'] * 100:.1f}%)"
            + (f", summed over {over} devices" if over > 1 else "")
            + (f"; {kinds} without the wait" if kinds else ""))
    for loop in s.get("loops", []):
        trips = f"{loop['trips']} trips" if loop["trips"] else "trips not known to XLA"
        count = loop["while_loops"]
        lines.append(f"loop       {loop['scope'] or '(top level)'}: {trips} per run of its "
                     "program" + (f" ({count} while loops: forward and backward passes)"
                                  if count == 2 else f" ({count} while loops)"
                                  if count > 2 else ""))
    if outside := s.get("outside_steps"):
        lines.append(f"outside    {outside.removeprefix('outside steps: ')}")
    if note := s.get("attribution_note"):
        lines.append(f"ops        {note}")
    for item in s.get("left_out", []):
        lines.append(f"left out   step {item['step']} on {item['worker']} "
                     f"({fmt_us(item['step_us'])}): {item['why']}")
    if any(item["why"] != "outside --steps" for item in s.get("left_out", [])):
        lines.append("           (averages, checks and comparisons leave these out: "
                     "--include-warmup keeps them; rule: docs/ci.md)")
    for why, what in lacks_by_reason(s.get("lacks", {})).items():
        lines.append(f"lacks      {', '.join(what)}: {why}")
    # The run's warnings are printed once, on stderr, when it is loaded (the JSON keeps
    # them as data).
    return "\n".join(lines) + "\n"


# What the step time measures (analysis.steps.step_times' `kind`).
_KIND_SAID = {"marker": "  (host: the step marker's span)",
              "device": "  (device: the step's device work)",
              "work": "  (the step's work: its marker covers only the dispatch)",
              "dispatch": "  (the markers' spans: dispatch only, not step times)"}


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    out, start, prev = [], steps[0], steps[0]
    for s in steps[1:] + [None]:  # type: ignore[list-item]
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(out)


def summary_json(s: dict) -> str:
    return json.dumps({"schema": SCHEMA, "summary": s}, indent=1) + "\n"


def _device_table(devices: list[dict]) -> list[str]:
    """The (worker, device) table, the devices that worked first (then, in the same
    order, those that worked in none of the steps, which say so); the worker column only
    when there are several (the `workers` line names the one)."""
    rows: list[tuple[str, ...]] = [("worker", "device", "node stats", "nodes",
                                    "device step", "busy", "idle", "collectives", "wait")]
    for d in sorted(devices, key=lambda d: (d["worker"], not d.get("steps_with_work"))):
        counts = (d["worker"], d["device"], f"{d['node_stats']:,}", f"{d['nodes']:,}")
        if not d.get("steps_with_work"):
            rows.append((*counts, "no work in this step" if d.get("steps") == 1 else
                         "no work in these steps", "", "", "", ""))
            continue
        idle = d["idle_share"]
        rows.append((*counts, fmt_us(d["device_step_us"]), fmt_us(d["busy_us"]),
                     _share(idle), fmt_us(d["collective_us"]),
                     fmt_us(d["collective_wait_us"])))
    if len({d["worker"] for d in devices}) == 1:
        rows = [r[1:] for r in rows]
    left = 1 if len(rows[0]) == 8 else 2  # the name columns
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) if i < left or c.startswith("no work") else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        out.append(("  " + "  ".join(cells)).rstrip())
    return out


def _step_median(s: dict) -> float | None:
    """The step time the devices' own steps are read against: the device step's median
    where there is one (accelerator profiles), else the step time's."""
    return (s.get("device_step_time_us") or s["step_time_us"]).get("median") or None


def _device_notes(devices: list[dict], step_us: float | None) -> list[str]:
    """What a row of the table cannot say: a device whose events of a step lie far apart
    (its own step several times the step time: its idle share is of that span), and a
    device whose events all lie outside the steps."""
    notes = []
    for d in devices:
        where = d["device"] if len({x["worker"] for x in devices}) == 1 \
            else f"{d['device']} on {d['worker']}"
        span = d.get("device_step_us")
        if d.get("steps_with_work") and step_us and span and span > 2 * step_us:
            notes.append(
                f"           {where}: its work in a step spans {fmt_us(span)}, "
                f"{span / step_us:.0f}x the step's {fmt_us(step_us)} (busy "
                f"{fmt_us(d['busy_us'])}): the step's events on it lie in parts far apart "
                "(`analyze timeline` shows the gap)")
        elif not d.get("steps_with_work") and d["node_stats"]:
            notes.append(f"           {where}: its {d['node_stats']:,} node stats lie "
                         "outside the steps")
    return notes


def _share(x: float | None) -> str:
    """A share in whole percent, never rounded to 0% or 100% when it is not."""
    if x is None:
        return ""
    if 0.995 <= x < 1:
        return ">99%"
    if 0 < x < 0.005:
        return "<1%"
    return f"{x:.0%}"

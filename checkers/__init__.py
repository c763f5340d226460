"""Advisor checkers: one module per checker, registered by code (RL1xx) and name.

`run_checks(run)` runs the selected checkers and returns their findings sorted by
severity, then impact. Importing this package registers every module in it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from ..analyzer.analysis.stepselect import StepChoice
from ..analyzer.errors import RunlensError
from ..analyzer.model import Run
from .base import REGISTRY, Analysis, Checker, Finding, Severity

__all__ = ["REGISTRY", "Analysis", "Checker", "Finding", "Severity", "all_checkers",
           "resolve", "run_checks", "skipped_checks"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def all_checkers() -> list[type[Checker]]:
    return [REGISTRY[code] for code in sorted(REGISTRY)]


def resolve(keys: list[str]) -> set[str]:
    """Codes of the checkers named by `keys` (codes or names, case-insensitive)."""
    by_key = {c.code.lower(): c.code for c in REGISTRY.values()}
    by_key.update({c.name.lower(): c.code for c in REGISTRY.values()})
    codes = set()
    for key in keys:
        code = by_key.get(key.strip().lower())
        if code is None:
            raise RunlensError(f"unknown checker {key!r} (see analyze advise --list)")
        codes.add(code)
    return codes


def _chosen(select: list[str] | None, ignore: list[str] | None) -> list[str]:
    chosen = resolve(select) if select else set(REGISTRY)
    return sorted(chosen - resolve(ignore or []))


def run_checks(run: Run, select: list[str] | None = None,
               ignore: list[str] | None = None,
               steps: StepChoice | None = None) -> list[Finding]:
    """Findings of the chosen checkers that can run on `run` (skipped_checks: the rest),
    over the steps `steps` keeps (default: warm-up and outlier steps left out)."""
    analysis = Analysis(run, steps)
    findings: list[Finding] = []
    for code in _chosen(select, ignore):
        checker = REGISTRY[code]()
        if checker.skip_reason(run) is None:
            findings.extend(checker.check(analysis))
    return sorted(findings, key=Finding.sort_key)


def skipped_checks(run: Run, select: list[str] | None = None,
                   ignore: list[str] | None = None) -> list[dict[str, str]]:
    """The chosen checkers that need what the run's input lacks: code, name and why."""
    out = []
    for code in _chosen(select, ignore):
        checker = REGISTRY[code]()
        reason = checker.skip_reason(run)
        if reason is not None:
            out.append({"code": code, "name": checker.name, "reason": reason})
    return out


def header(run: Run, name: str, steps: StepChoice | None = None,
           select: list[str] | None = None, ignore: list[str] | None = None
           ) -> dict[str, Any]:
    """The numbers above the findings: the run's name, its traced steps, the median step
    time of the steps `steps` keeps, which steps were left out and why (said once), and
    what the input lacks with the chosen checkers that needed it."""
    from ..analyzer.analysis.steps import median_step_us, step_times
    from ..analyzer.analysis.stepselect import analysed, left_out
    from ..analyzer.readfile import shown

    chosen = analysed(run, steps)
    meta: dict[str, Any] = {"run": shown(name), "steps": len(run.steps),
                            "median_step_us": median_step_us(chosen),
                            "median_over_steps": step_times(chosen).height}
    dropped = left_out(run, steps or StepChoice())
    if dropped:
        meta["left_out"] = dropped
    if run.lacks:
        meta.update(lacks=run.lacks, skipped=skipped_checks(run, select, ignore))
    return meta

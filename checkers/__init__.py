"""Advisor checkers: one module per checker, registered by code (RL1xx) and name.

`run_checks(run)` runs the selected checkers and returns their findings sorted by
severity, then impact. Importing this package registers every module in it.
"""

from __future__ import annotations

import importlib
import pkgutil

from analyzer.errors import RunlensError
from analyzer.model import Run
from checkers.base import REGISTRY, Analysis, Checker, Finding, Severity

__all__ = ["REGISTRY", "Analysis", "Checker", "Finding", "Severity", "all_checkers",
           "resolve", "run_checks"]

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


def run_checks(run: Run, select: list[str] | None = None,
               ignore: list[str] | None = None) -> list[Finding]:
    chosen = resolve(select) if select else set(REGISTRY)
    chosen -= resolve(ignore or [])
    analysis = Analysis(run)
    findings: list[Finding] = []
    for code in sorted(chosen):
        findings.extend(REGISTRY[code]().check(analysis))
    return sorted(findings, key=Finding.sort_key)

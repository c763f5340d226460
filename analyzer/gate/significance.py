"""The significance stage of the CI gate: p-values, their adjustment and the effect with
its interval for every compared metric (docs/ci.md, "Which decision makes the exit code").

Step time and op time are tested on their own (exact one-sided Mann-Whitney, Bonferroni
over the two); scopes and op types that can be called (a floor) are one family under
Benjamini-Hochberg. Where the sample sizes cannot reach alpha, only complete separation
is called, and a warning says so. Below MIN_STEPS a side there is no test at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .stats import benjamini_hochberg, hodges_lehmann, mann_whitney_greater, smallest_p

MIN_STEPS = 3  # fewer steps a side: no test at all, the floors alone decide (a warning)


@dataclass
class Tests:
    """Per metric: one-sided p-values up and down (raw and adjusted), whether each is
    significant, and the effect (a ratio) with its 95% interval (NaN without a test)."""

    testable: bool
    method: str
    p_up: np.ndarray
    p_down: np.ndarray
    q_up: np.ndarray
    q_down: np.ndarray
    sig_up: np.ndarray
    sig_down: np.ndarray
    ratio: np.ndarray
    r_low: np.ndarray
    r_high: np.ndarray


def _untested(b_med: np.ndarray, n_med: np.ndarray, nb: int, nn: int,
              warnings: list[str]) -> Tests:
    warnings.append(f"fewer than {MIN_STEPS} steps on a side ({nb} base, {nn} new): "
                    "no significance test, the effect-size floors alone decide")
    nan = np.full(len(b_med), np.nan)
    ones = np.ones(len(b_med), bool)
    return Tests(False, "no test (fewer than 3 steps a side: the effect-size floors alone "
                 "decide)", nan, nan, nan.copy(), nan.copy(), ones, ones.copy(),
                 (n_med + 1.0) / (b_med + 1.0), nan, nan)


def _too_few(t: Tests, test: str, family: np.ndarray, is_step: np.ndarray, nb: int, nn: int,
             alpha: float, warnings: list[str]) -> None:
    """Sample sizes that cannot reach alpha: say so, and call only complete separation
    (every new step slower than every base step) above the floor."""
    p_min = smallest_p(nn, nb)
    tied = p_min * (1 + 1e-9)
    if family.any() and p_min > alpha / family.sum():
        t.method = (f"{test} (one-sided; step time and op time Bonferroni; scopes and op "
                    "types: complete separation, too few steps for Benjamini-Hochberg)")
        warnings.append(
            f"with {nb} base and {nn} new steps the smallest exact p is {p_min:.2g}, "
            f"above the {alpha / family.sum():.2g} Benjamini-Hochberg needs over "
            f"{int(family.sum())} scopes and op types: a scope or op type is called "
            "only when every new step is slower than every base step (and the floor "
            "holds); trace 10 or more steps a side for a real test")
        t.sig_up[family] = t.p_up[family] <= tied
        t.sig_down[family] = t.p_down[family] <= tied
    step_alpha = alpha / max(1, int(is_step.sum()))
    if is_step.any() and p_min >= step_alpha:
        warnings.append(f"with {nb} base and {nn} new steps the smallest exact p is "
                        f"{p_min:.2g}, not below {step_alpha:.2g}: step time and op "
                        "time are called only on complete separation; trace more steps")
        t.sig_up[is_step] = t.p_up[is_step] <= tied
        t.sig_down[is_step] = t.p_down[is_step] <= tied


def significance(b: np.ndarray, n: np.ndarray, is_step: np.ndarray, family: np.ndarray,
                 b_med: np.ndarray, n_med: np.ndarray, alpha: float,
                 warnings: list[str]) -> Tests:
    """Test every metric (rows of `b`, `n`: base and normalized new samples). `family`:
    the scopes and op types tested together (Benjamini-Hochberg); `is_step`: the
    step-level metrics (Bonferroni over them)."""
    nb, nn = b.shape[1], n.shape[1]
    if min(nb, nn) < MIN_STEPS:
        return _untested(b_med, n_med, nb, nn, warnings)
    p_up, test = mann_whitney_greater(n, b)
    p_down, _ = mann_whitney_greater(b, n)
    # Effect: Hodges-Lehmann shift of log(time + 1us): a ratio with its exact 95% CI.
    shift, low, high = hodges_lehmann(np.log(n + 1.0), np.log(b + 1.0))
    q_up, q_down = p_up.copy(), p_down.copy()
    # Step level: step time and op time, each at alpha / 2 (Bonferroni over the two).
    q_up[is_step] = np.minimum(1.0, p_up[is_step] * is_step.sum())
    q_down[is_step] = np.minimum(1.0, p_down[is_step] * is_step.sum())
    if family.any():
        q_up[family] = benjamini_hochberg(p_up[family])
        q_down[family] = benjamini_hochberg(p_down[family])
    method = (f"{test} (one-sided; step time and op time Bonferroni, scopes and op "
              "types Benjamini-Hochberg)")
    t = Tests(True, method, p_up, p_down, q_up, q_down, q_up < alpha, q_down < alpha,
              np.exp(shift), np.exp(low), np.exp(high))
    _too_few(t, test, family, is_step, nb, nn, alpha, warnings)
    return t

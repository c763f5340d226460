"""Names too long for a text column, cut in the middle so that the tail that tells them
apart stays (`train/gradients/…/Conv2DBackpropFilter`, not `…/Conv2DBa…`), and the width
the terminal gives (`COLUMNS`, else the terminal's own; None when output is piped and
COLUMNS is unset, so piped output does not depend on a terminal)."""

from __future__ import annotations

import os
import sys

ELLIPSIS = "…"
MIN_NAME = 32  # a name column never narrower than this, whatever the terminal


def text_columns() -> int | None:
    """The width text output should fit: COLUMNS when set to a number, else the
    terminal's when stdout is one, else None."""
    value = os.environ.get("COLUMNS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return None


def cut_middle(text: str, width: int) -> str:
    """`text` in at most `width` characters: a head, "…", and a longer tail (two thirds
    of the room: a name's last parts are what tells siblings apart)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    tail = (width - 1) * 2 // 3
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def _keep(text: str, points: list[int], width: int) -> str | None:
    """`text` in at most `width` characters keeping its head, a few characters from each
    of `points` (where it differs from names it would be cut alike with) and its tail,
    "…" for each gap; None when that does not fit."""
    for tail in (width // 3, width // 4, 8, 4, 2):
        for win in (8, 5, 3, 2, 1):
            for head in (max(1, width // 6), 2, 1):
                spans = sorted([(0, head), (max(0, len(text) - tail), len(text)),
                                *[(max(0, p - 1), p + win) for p in points]])
                merged: list[list[int]] = []
                for lo, hi in spans:
                    if merged and lo <= merged[-1][1]:
                        merged[-1][1] = max(merged[-1][1], hi)
                    else:
                        merged.append([lo, min(hi, len(text))])
                size = sum(hi - lo for lo, hi in merged) + len(merged) - 1
                if size <= width:
                    return ELLIPSIS.join(text[lo:hi] for lo, hi in merged)
    return None


def distinct_cuts(texts: list[str], width: int) -> list[str]:
    """Each of `texts` cut to `width` (cut_middle), such that distinct texts never print
    as the same cut: texts whose cuts collide keep the places where they differ from
    each other (again, as long as new cuts collide), and print in full where even that
    does not tell them apart."""
    cuts = [cut_middle(t, width) for t in texts]
    points: dict[int, set[int]] = {}
    for _ in range(4):
        clash = _clashes(texts, cuts)
        if not clash:
            return cuts
        for i, others in clash.items():
            points.setdefault(i, set()).update(
                len(os.path.commonprefix([texts[i], other])) for other in others)
            cuts[i] = _keep(texts[i], sorted(points[i]), width) or texts[i]
    clash = _clashes(texts, cuts)
    return [texts[i] if i in clash else cut for i, cut in enumerate(cuts)]


def _clashes(texts: list[str], cuts: list[str]) -> dict[int, set[str]]:
    """Per index whose cut another text shares: those other texts."""
    groups: dict[str, set[str]] = {}
    for text, cut in zip(texts, cuts, strict=True):
        groups.setdefault(cut, set()).add(text)
    return {i: groups[cut] - {texts[i]} for i, cut in enumerate(cuts)
            if len(groups[cut]) > 1}

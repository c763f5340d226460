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


def _around(text: str, width: int, at: int) -> str:
    """`text` cut to `width` keeping its head, the part from `at` on and its tail."""
    head, tail = max(1, width // 6), max(1, width // 3)
    room = width - head - tail - 2
    if room < 1 or at + room >= len(text) - tail:
        return cut_middle(text, width)
    start = max(head, at - room // 3)
    return text[:head] + ELLIPSIS + text[start:start + room] + ELLIPSIS + text[-tail:]


def distinct_cuts(texts: list[str], width: int) -> list[str]:
    """Each of `texts` cut to `width` (cut_middle), such that distinct texts never print
    as the same cut: texts whose cuts collide show the part where they differ instead,
    and in full where even that does not tell them apart."""
    cuts = [cut_middle(t, width) for t in texts]
    groups: dict[str, set[str]] = {}
    for text, cut in zip(texts, cuts, strict=True):
        groups.setdefault(cut, set()).add(text)
    clash = {cut: sorted(group) for cut, group in groups.items() if len(group) > 1}
    if not clash:
        return cuts
    for i, cut in enumerate(cuts):
        if cut in clash:
            group = clash[cut]
            at = len(os.path.commonprefix(group))
            cuts[i] = _around(texts[i], width, at)
    seen: dict[str, set[str]] = {}
    for text, cut in zip(texts, cuts, strict=True):
        seen.setdefault(cut, set()).add(text)
    return [text if len(seen[cut]) > 1 else cut for text, cut in zip(texts, cuts, strict=True)]

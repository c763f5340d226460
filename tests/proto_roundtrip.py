"""Round-trip check between runlens' protobuf classes and TensorFlow's.

``assert_round_trip(raw, ours_cls, tf_cls)`` proves, for one serialized message,
that our wire-compatible subset (analyzer/proto) loses nothing:

1. parsing ``raw`` with our class, re-serializing it, and parsing that with
   TensorFlow's class gives a message equal to TensorFlow's parse of ``raw``
   (fields we do not declare survive as unknown fields);
2. walking both parses recursively and matching fields by number, every field
   that TensorFlow's parse has set and that we declare is set in our parse too,
   with the same value, and vice versa.

This module does not import TensorFlow: the caller passes TF's class.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_MAX_PROBLEMS = 25


def assert_round_trip(raw: bytes, ours_cls: type[Message], tf_cls: type[Message]) -> list[str]:
    """Assert ``raw`` survives our parse + re-serialization and that our parse
    covers every known field TF's parse has set.

    Returns the sorted full names (TensorFlow's) of fields present in ``raw``
    that we do not declare; those were carried as unknown fields.
    """
    assert ours_cls.DESCRIPTOR.name == tf_cls.DESCRIPTOR.name, (
        f"comparing {ours_cls.DESCRIPTOR.full_name} with {tf_cls.DESCRIPTOR.full_name}"
    )
    ours = ours_cls.FromString(raw)
    theirs = tf_cls.FromString(raw)

    again = tf_cls.FromString(ours.SerializeToString())
    if again != theirs:
        diff = difflib.unified_diff(
            str(theirs).splitlines(),
            str(again).splitlines(),
            "tf(raw)",
            "tf(ours(raw).SerializeToString())",
            n=2,
            lineterm="",
        )
        lines = list(diff)
        raise AssertionError(
            f"{tf_cls.DESCRIPTOR.full_name} changed after a round trip through "
            f"{ours_cls.DESCRIPTOR.full_name}:\n" + "\n".join(lines[:60])
        )

    problems: list[str] = []
    undeclared: set[str] = set()
    _compare_messages(ours, theirs, tf_cls.DESCRIPTOR.name, problems, undeclared)
    if problems:
        shown = problems[:_MAX_PROBLEMS]
        more = len(problems) - len(shown)
        raise AssertionError(
            f"our parse of {tf_cls.DESCRIPTOR.full_name} disagrees with TensorFlow's "
            f"({len(problems)} problem(s)):\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more > 0 else "")
        )
    return sorted(undeclared)


def _is_map(fd: FieldDescriptor) -> bool:
    return (
        fd.type == FieldDescriptor.TYPE_MESSAGE
        and fd.message_type is not None
        and fd.message_type.GetOptions().map_entry
    )


def _scalar_equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _compare_messages(
    ours: Message, theirs: Message, path: str, problems: list[str], undeclared: set[str]
) -> None:
    ours_set = {fd.number: (fd, v) for fd, v in ours.ListFields()}
    theirs_set = {fd.number: (fd, v) for fd, v in theirs.ListFields()}
    declared = ours.DESCRIPTOR.fields_by_number

    for number, (tfd, tv) in sorted(theirs_set.items()):
        where = f"{path}.{tfd.name}"
        if number not in declared:
            undeclared.add(tfd.full_name)
            continue
        if number not in ours_set:
            problems.append(f"{where} (#{number}) is set in TF's parse but not in ours")
            continue
        ofd, ov = ours_set[number]
        if ofd.name != tfd.name:
            problems.append(f"{where} (#{number}) is named {ofd.name!r} in ours")
            continue
        _compare_field(ofd, ov, tfd, tv, where, problems, undeclared)

    for number in sorted(ours_set.keys() - theirs_set.keys()):
        ofd = ours_set[number][0]
        problems.append(f"{path}.{ofd.name} (#{number}) is set in our parse but not in TF's")


def _compare_field(
    ofd: FieldDescriptor,
    ov: Any,
    tfd: FieldDescriptor,
    tv: Any,
    where: str,
    problems: list[str],
    undeclared: set[str],
) -> None:
    if _is_map(tfd):
        if not _is_map(ofd):
            problems.append(f"{where}: map in TF, not in ours")
            return
        okeys, tkeys = set(ov.keys()), set(tv.keys())
        if okeys != tkeys:
            problems.append(
                f"{where}: map keys differ: only ours {sorted(okeys - tkeys)[:5]}, "
                f"only TF {sorted(tkeys - okeys)[:5]}"
            )
            return
        value_fd = tfd.message_type.fields_by_name["value"]
        for key in sorted(tkeys):
            _compare_single(value_fd, ov[key], tv[key], f"{where}[{key!r}]", problems, undeclared)
        return

    if tfd.is_repeated:
        if len(ov) != len(tv):
            problems.append(f"{where}: {len(ov)} element(s) in ours, {len(tv)} in TF's")
            return
        for i, (o, t) in enumerate(zip(ov, tv, strict=True)):
            _compare_single(tfd, o, t, f"{where}[{i}]", problems, undeclared)
        return

    _compare_single(tfd, ov, tv, where, problems, undeclared)


def _compare_single(
    tfd: FieldDescriptor, o: Any, t: Any, where: str, problems: list[str], undeclared: set[str]
) -> None:
    if tfd.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        if not isinstance(o, Message):
            problems.append(f"{where}: message in TF, {type(o).__name__} in ours")
            return
        _compare_messages(o, t, where, problems, undeclared)
    elif not _scalar_equal(o, t):
        problems.append(f"{where}: ours {o!r} != TF {t!r}")

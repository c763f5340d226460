"""Collectives in an XSpace: the wait for peers as its own executions, and a combined
collective's time shared back to the ops whose data it carried.

- XLA:CPU runs a collective (an all-reduce thunk) on each replica's thread; inside it
  each replica meets the others in `Rendezvous` events (stat `name`: "all reduce
  RendezvousKey{...}"), where it waits until every replica has arrived (the last one
  to arrive runs the exchange, `InvokeRendezvous`, inside its own). Each `Rendezvous`
  becomes an execution `peer-wait/<kind>` (op type `peer-wait`), nested in its
  collective on the same line, so that the collective's self time is its own work and
  the wait is a row of its own: not charged to the scope that issued the collective.
- A collective HLO instruction has shares (hlo_collectives: one per scope its operands
  came from, by bytes); each of its events becomes one execution per share, one after
  the other within the event's span, each with its fraction of the event's duration
  and self time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import WAIT_TYPE  # the op type of the wait rows (said once, with the model)
from .hlo_collectives import COLLECTIVE_OPCODES
from .xplane_hlo import HloOp
from .xplane_wire import Plane

Ops = Any  # xplane_read.Ops (which imports this module: not imported back)

_KEY = "RendezvousKey"
KINDS = frozenset(c.removesuffix("-start").removesuffix("-done") for c in COLLECTIVE_OPCODES)


def wait_kind(name: str) -> str:
    """`all reduce RendezvousKey{...}` -> `all-reduce`; "" when the name is no
    collective's."""
    head, sep, _ = name.partition(_KEY)
    return "-".join(head.split()) if sep and head.strip() else ""


RENDEZVOUS = "Rendezvous"  # XLA CPU: a replica waiting for its peers in a collective


def rendezvous_ids(plane: Plane) -> np.ndarray:
    """The event metadata ids of a host plane's `Rendezvous` events."""
    return np.array(sorted(mid for mid, m in plane.meta.event_metadata.items()
                           if m.name == RENDEZVOUS), np.int64)


def wait_nodes(ops: Ops, which: np.ndarray, names: list[str]) -> np.ndarray:
    """The node of each `Rendezvous` event (`peer-wait/<kind>`; -1: no collective's),
    from its `name` stat (xplane_read.texts: the code of each event, the texts)."""
    kinds = [wait_kind(n) for n in names]
    table = np.array([ops.name_id(f"{WAIT_TYPE}/{k}", WAIT_TYPE) if k else -1
                      for k in kinds], np.int64)
    return table[which]


def op_node(ops: Ops, op: HloOp, suffix: str = "") -> int:
    """The name id of an HLO op's executions (its op name + `suffix`: a device event's
    `:kernel`); a shared collective's shares recorded."""
    got = ops.name_id(op.op_name + suffix, op.op_type)
    if len(op.shares) > 1 and got not in ops.shares:
        ops.shares[got] = [(ops.name_id(n + suffix, t), f) for n, t, f in op.shares]
    return got


def split_shares(ops: Ops) -> None:
    """Every execution of a shared collective -> one execution per share, in place."""
    if not ops.shares or not ops.name:
        return
    name = np.concatenate(ops.name).astype(np.int64)
    shared = np.flatnonzero(np.isin(name, np.array(list(ops.shares), np.int64)))
    if not len(shared):
        return
    cols = {k: np.concatenate(getattr(ops, k)) for k in
            ("lane", "thread", "start_ps", "dur_ps", "self_ps", "group", "run", "corr",
             "piece")}
    keep = np.ones(len(name), bool)
    keep[shared] = False
    pieces: dict[str, list[np.ndarray]] = {k: [v[keep]] for k, v in cols.items()}
    pieces["name"] = [name[keep]]
    for nid, parts in sorted(ops.shares.items()):
        rows = shared[name[shared] == nid]
        if not len(rows):
            continue
        dur, own, before = cols["dur_ps"][rows], cols["self_ps"][rows], 0.0
        for index, (share_id, frac) in enumerate(parts):
            for k in ("lane", "thread", "group", "run", "corr"):  # each share as launched
                pieces[k].append(cols[k][rows])
            pieces["piece"].append(np.full(len(rows), index, np.int64))
            pieces["start_ps"].append(cols["start_ps"][rows]
                                      + (dur * before).astype(np.int64))
            pieces["dur_ps"].append((dur * frac).astype(np.int64))
            pieces["self_ps"].append((own * frac).astype(np.int64))
            pieces["name"].append(np.full(len(rows), share_id, np.int64))
            before += frac
    for k, v in pieces.items():
        setattr(ops, k, [np.concatenate(v)])


def enclosing(ops: Ops) -> tuple[np.ndarray, np.ndarray]:
    """(wait rows, the collective row each is nested in: same thread, within its span;
    -1 where none) over the concatenated columns of `ops`."""
    name = np.concatenate(ops.name).astype(np.int64) if ops.name else np.zeros(0, np.int64)
    types = [t for _, t in ops.names] or [""]  # per name: decided once, gathered per row
    waits = np.flatnonzero(np.array([t == WAIT_TYPE for t in types], bool)[name])
    coll = np.flatnonzero(np.array([t in KINDS for t in types], bool)[name])
    outer = np.full(len(waits), -1, np.int64)
    if not len(waits) or not len(coll):
        return waits, outer
    thread = np.concatenate(ops.thread).astype(np.int64)
    start = np.concatenate(ops.start_ps).astype(np.int64)
    end = start + np.concatenate(ops.dur_ps).astype(np.int64)
    for t in np.unique(thread[waits]).tolist():
        c = coll[thread[coll] == t]
        mine = np.flatnonzero(thread[waits] == t)
        if not len(c):
            continue
        c = c[np.argsort(start[c], kind="stable")]
        w = waits[mine]
        at = np.searchsorted(start[c], start[w], side="right") - 1
        ok = (at >= 0) & (end[c[np.clip(at, 0, None)]] >= end[w])
        outer[mine[ok]] = c[at[ok]]
    return waits, outer


def wait_lanes(ops: Ops) -> None:
    """Each wait row on the lane of the collective it is nested in, in place: the wait is
    its replica's, whichever lane (device) that collective's events were given."""
    waits, outer = enclosing(ops)
    if not len(waits) or not (outer >= 0).any():
        return
    lane = np.concatenate(ops.lane)
    lane[waits[outer >= 0]] = lane[outer[outer >= 0]]
    ops.lane = [lane]
    for k in ("thread", "start_ps", "dur_ps", "self_ps", "group", "name"):
        setattr(ops, k, [np.concatenate(getattr(ops, k))])

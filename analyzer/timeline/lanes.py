"""Processes, threads and lanes of the timeline.

A process per (worker, device), plus "Steps" (pid 0) and one "Allocators" process per
worker for the memory counters. Inside a device process, a track per real thread_id of
the op lanes ("thread 3", or its name from the trace's thread_names), per GPU stream
("stream:all", "stream:12", "memcpy") and the critical path. Events of a track that would
overlap go to extra lanes ("thread 0 (lane 2)"), so that no two events on one Chrome
Trace thread overlap at all (they touch at most): greedy interval colouring (each event
takes the lowest lane free at its start), computed with numpy for all tracks at once.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import polars as pl

_RANK = {"device": 0, "other": 0, "stream_all": 1, "stream": 2, "memcpy": 3}
CRITICAL_RANK = 9


def processes(x: pl.DataFrame, workers: list[str]) -> pl.DataFrame:
    """pid and name per (worker, device) of `x`, then an "Allocators" process per worker
    (device null). Names carry the worker when the run has several."""
    multi = len(workers) > 1
    devices = x.select("worker", "device").unique().sort("worker", "device")
    allocators = pl.DataFrame({"worker": workers, "device": [None] * len(workers)},
                              schema={"worker": pl.String, "device": pl.String})
    procs = pl.concat([devices, allocators]).with_row_index("pid", offset=1)
    name = pl.coalesce("device", pl.lit("Allocators"))
    if multi:
        name = pl.concat_str("worker", pl.lit(" "), name)
    return procs.with_columns(pl.col("pid").cast(pl.Int64), name=name)


def op_tracks(x: pl.DataFrame, procs: pl.DataFrame, threads: pl.DataFrame) -> pl.DataFrame:
    """One row per (worker, lane, thread_id) of executions: pid, rank (op lanes,
    stream:all, streams, memcpy), order (thread or stream number) and name."""
    t = x.select("worker", "device", "lane", "lane_kind", "thread_id").unique()
    named = threads.select("worker", "lane", "thread_id", thread_name="name").unique(
        ["worker", "lane", "thread_id"], keep="first", maintain_order=True)
    t = t.join(named, on=["worker", "lane", "thread_id"], how="left").join(
        procs.select("worker", "device", "pid"), on=["worker", "device"])
    kind = pl.col("lane_kind")
    tid = pl.col("thread_id").cast(pl.String)
    op_name = pl.coalesce("thread_name", pl.concat_str(pl.lit("thread "), tid))
    op_name = pl.when(pl.col("lane").str.to_lowercase() == pl.col("device")).then(
        op_name).otherwise(pl.concat_str("lane", pl.lit(" "), op_name))
    stream = pl.coalesce(pl.col("lane").str.extract(r"/((?:stream|memcpy)[^/]*)$", 1), "lane")
    stream = pl.when(pl.col("thread_id") == 0).then(stream).otherwise(
        pl.concat_str(stream, pl.lit(" thread "), tid))
    number = pl.col("lane").str.extract(r"stream:(\d+)", 1).cast(pl.Int64)
    return t.select(
        "worker", "lane", "thread_id", "pid",
        rank=kind.replace_strict(_RANK, default=0, return_dtype=pl.Int64),
        order=pl.coalesce(number, pl.col("thread_id").cast(pl.Int64)),
        name=pl.when(kind.is_in(["device", "other"])).then(op_name).otherwise(stream),
    )


def number_tracks(tables: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """Give every track of `tables` (each with pid, rank, order, name) a distinct
    track_id, in display order."""
    cols = ["pid", "rank", "order", "name"]
    ids = (pl.concat([t.select(cols) for t in tables]).unique().sort(cols)
           .with_row_index("track_id"))
    return [t.join(ids, on=cols) for t in tables]


DEEP = 24  # lanes found by doubling before the heap sweep takes the rest


def _sweep(seg: list[int], ts: list[int], end: list[int]) -> list[int]:
    """Lowest free lane for each interval, in start order; lanes reset at each new seg."""
    out: list[int] = []
    busy: list[tuple[int, int]] = []
    free: list[int] = []
    count = 0
    current = None
    for s, a, b in zip(seg, ts, end, strict=True):
        if s != current:
            current, busy, free, count = s, [], [], 0
        while busy and busy[0][0] <= a:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        heapq.heappush(busy, (b, lane))
        out.append(lane)
    return out


def _ranks(*arrays: np.ndarray) -> list[np.ndarray]:
    """The values of `arrays` replaced by their ranks among all of them (order kept)."""
    values, inverse = np.unique(np.concatenate(arrays), return_inverse=True)
    out, at = [], 0
    for a in arrays:
        out.append(inverse[at:at + a.size].astype(np.int64))
        at += a.size
    return out


def lanes(track: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The lane of each interval [ts, end] within its track: the lowest lane free at its
    start, taking intervals in (track, ts, end, row) order (a lane is free once its last
    interval has ended; touching is fine). Greedy interval colouring, vectorised:

    - a stretch of intervals that overlaps nothing before it starts afresh, and a stretch
      of one interval (nearly all of them) is lane 0;
    - lane k is a greedy chain over the intervals not on lanes < k: from the first of each
      stretch, the next is the first later interval that starts at or after its end;
      the chains are followed for all stretches at once by pointer doubling (past DEEP
      lanes, a heap sweep takes the rest).
    """
    n = ts.size
    sub = np.zeros(n, np.int64)
    if n < 2:
        return sub
    track, ts, end = (np.asarray(a, np.int64) for a in (track, ts, end))
    lo = int(min(ts.min(), end.min()))
    span = int(max(ts.max(), end.max())) - lo + 1
    t0 = int(track.min())
    if (int(track.max()) - t0 + 1) * span < 1 << 62:
        # One time line for all tracks: a later track starts after every end of the ones
        # before (track ids are dense, from number_tracks: they need no ranking).
        at = (track - t0) * span + (ts - lo)
        order = np.lexsort((end, at))  # stable: ties in row order
        a = at[order]
        b = a + (end - ts)[order]
    else:
        order = np.lexsort((end, ts, track))
        t, a, b = track[order], ts[order], end[order]
        k = np.cumsum(np.r_[False, t[1:] != t[:-1]])  # track rank
        if (int(k[-1]) + 1) * span >= 1 << 62:
            a, b = _ranks(a, b)
            lo, span = 0, 2 * n
        a = a - lo + k * span
        b = b - lo + k * span
    prev_end = np.maximum.accumulate(b)
    fresh = np.r_[True, a[1:] >= prev_end[:-1]]
    seg = np.cumsum(fresh)
    alone = fresh & np.r_[fresh[1:], True]  # a stretch of one interval
    multi = np.flatnonzero(~alone)  # sorted positions of the others
    a, b, seg = a[multi], b[multi], seg[multi]
    reach = np.searchsorted(a, b, side="left")  # the first interval starting after b
    todo = np.ones(multi.size, bool)  # no lane yet
    lane = 0
    while todo.any():
        rest = np.flatnonzero(todo)
        m = rest.size
        if lane == DEEP:  # many lanes deep: the rest by a heap sweep, lane by lane is slower
            sub[order[multi[rest]]] = lane + np.asarray(
                _sweep(seg[rest].tolist(), a[rest].tolist(), b[rest].tolist()), np.int64)
            break
        rank = np.concatenate([[0], np.cumsum(todo)])  # intervals without a lane before p
        rs = seg[rest]
        nxt = np.maximum(np.arange(1, m + 1), rank[reach[rest]])
        inside = nxt < m
        inside[inside] = rs[nxt[inside]] == rs[inside]
        jump = np.append(np.where(inside, nxt, m), m).astype(np.int32)  # m: past the end
        first = np.r_[True, rs[1:] != rs[:-1]]  # of each stretch: lane `lane`
        on = np.append(first, True)
        at = np.flatnonzero(first)
        # Doubling: `at` holds the first 2^i intervals of each chain, jump = next^(2^i).
        # The chains are disjoint paths: the intervals 2^i further on are new and distinct
        # (or past the end, which is `on`).
        while True:
            ahead = jump[at]
            ahead = ahead[~on[ahead]]
            if not ahead.size:
                break
            on[ahead] = True
            at = np.concatenate([at, ahead])
            jump = jump[jump]
        chain = rest[on[:m]]
        sub[order[multi[chain]]] = lane
        todo[chain] = False
        lane += 1
    return sub


def sublanes(frame: pl.DataFrame) -> pl.DataFrame:
    """Add `sub`: the lane within the track (`track_id`) so that intervals [ts, end] on one
    lane only touch (see `lanes`)."""
    sub = lanes(*(frame.get_column(c).to_numpy() for c in ("track_id", "ts", "end")))
    return frame.with_columns(sub=pl.Series(sub))


def place(frames: list[pl.DataFrame], tracks: pl.DataFrame,
          subs: list[np.ndarray | None] | None = None
          ) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """Lanes and tids for frames of complete events (each with track_id, ts and end), given
    the tracks (track_id, pid, name). Returns the frames with `sub` and `tid`, and the
    threads: pid, tid, name (a thread per lane of each track that has events).

    `subs`: the lanes of some frames, already found by `lanes` (frames whose tracks no
    other frame uses: lanes are per track)."""
    given = subs or [None] * len(frames)
    cols = [[f.get_column(c).to_numpy().astype(np.int64) for f in frames]
            for c in ("track_id", "ts", "end")]
    todo = [i for i, s in enumerate(given) if s is None]
    found = lanes(*(np.concatenate([c[i] for i in todo]) if todo else np.zeros(0, np.int64)
                    for c in cols))
    parts: list[np.ndarray] = []
    done = 0
    for i, known in enumerate(given):
        if known is None:
            known = found[done:done + frames[i].height]
            done += frames[i].height
        parts.append(np.asarray(known, np.int64))
    track = np.concatenate(cols[0])
    sub = np.concatenate(parts)
    info = tracks.select("track_id", "pid", "name").unique("track_id").sort("track_id")
    size = int(max(info["track_id"].max() or 0, track.max(initial=0))) + 1
    width = (np.bincount(track, minlength=size) > 0).astype(np.int64)  # lanes per track
    deep = np.flatnonzero(sub)
    np.maximum.at(width, track[deep], sub[deep] + 1)
    base = np.zeros(width.size, np.int64)  # the tid of each track's lane 0
    rows: list[tuple[int, int, str]] = []
    used: dict[int, int] = {}
    for track_id, pid, name in info.iter_rows():
        for s in range(int(width[track_id])):
            used[pid] = tid = used.get(pid, 0) + 1
            if s == 0:
                base[track_id] = tid
            rows.append((pid, tid, name if s == 0 else f"{name} (lane {s})"))
    tid = base[track] + sub
    placed, at = [], 0
    for f in frames:
        h = f.height
        placed.append(f.with_columns(sub=pl.Series(sub[at:at + h]),
                                     tid=pl.Series(tid[at:at + h])))
        at += h
    threads = pl.DataFrame(rows, schema={"pid": pl.Int64, "tid": pl.Int64, "name": pl.String},
                           orient="row")
    return placed, threads


def metadata(procs: pl.DataFrame, threads: pl.DataFrame) -> list[dict[str, Any]]:
    """process_name / thread_name and sort-index events ("ph": "M")."""
    out: list[dict[str, Any]] = []

    def meta(kind: str, pid: int, tid: int | None, args: dict[str, Any]) -> None:
        event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid}
        if tid is not None:
            event["tid"] = tid
        event["args"] = args
        out.append(event)

    rows = [(0, "Steps"), *procs.select("pid", "name").iter_rows()]
    for pid, name in rows:
        meta("process_name", pid, None, {"name": name})
        meta("process_sort_index", pid, None, {"sort_index": pid})
    for pid, tid, name in threads.sort("pid", "tid").iter_rows():
        meta("thread_name", pid, tid, {"name": name})
        meta("thread_sort_index", pid, tid, {"sort_index": tid})
    return out

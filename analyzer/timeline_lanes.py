"""Processes, threads and lanes of the timeline.

A process per (worker, device), plus "Steps" (pid 0) and one "Allocators" process per
worker for the memory counters. Inside a device process, a track per real thread_id of
the op lanes ("thread 3", or its name from the trace's thread_names), per GPU stream
("stream:all", "stream:12", "memcpy") and the critical path. Events of a track that would
overlap go to extra lanes ("thread 0 (lane 2)"), so that no two events on one Chrome
Trace thread overlap at all (they touch at most): greedy interval colouring, found by a
vectorised pass that leaves only the overlapping stretches to a heap sweep.
"""

from __future__ import annotations

import heapq
from typing import Any

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


def sublanes(frame: pl.DataFrame) -> pl.DataFrame:
    """Add `sub`: the lane within the track (`track_id`) so that intervals [ts, end] on one
    lane only touch. A stretch of intervals that overlaps nothing before it starts afresh;
    stretches of one interval (nearly all of them) take lane 0 without a Python step."""
    f = (frame.select("track_id", "ts", "end").with_row_index("_row")
         .sort("track_id", "ts", "end", "_row"))
    prev_end = pl.col("end").cum_max().shift(1).over("track_id")
    f = f.with_columns(_seg=(prev_end.is_null() | (pl.col("ts") >= prev_end)).cum_sum())
    f = f.with_columns(_multi=pl.len().over("_seg") > 1)
    multi = f.filter("_multi")
    sub = pl.zeros(frame.height, pl.Int64, eager=True).alias("sub")
    if multi.height:
        subs = _sweep(multi["_seg"].to_list(), multi["ts"].to_list(), multi["end"].to_list())
        sub = sub.scatter(multi["_row"], subs)  # back in the frame's own row order
    return frame.with_columns(sub)


def place(frames: list[pl.DataFrame], tracks: pl.DataFrame
          ) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """Lanes and tids for frames of complete events (each with track_id, ts and end), given
    the tracks (track_id, pid, name). Returns the frames with `tid`, and the threads: pid,
    tid, name."""
    frames = [sublanes(f) for f in frames]
    threads = (
        pl.concat([f.select("track_id", "sub").unique() for f in frames])
        .join(tracks.select("track_id", "pid", "name").unique(), on="track_id")
        .sort("track_id", "sub")
        .with_columns(tid=pl.int_range(pl.len()).over("pid") + 1)
    )
    ids = threads.select("track_id", "sub", "tid")
    placed = [f.with_columns(f.select("track_id", "sub").join(
        ids, on=["track_id", "sub"], how="left", maintain_order="left")["tid"])
        for f in frames]
    return placed, threads.select(
        "pid", "tid",
        name=pl.when(pl.col("sub") == 0).then("name").otherwise(
            pl.concat_str("name", pl.lit(" (lane "), "sub", pl.lit(")"))))


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

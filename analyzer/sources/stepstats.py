"""Raw RunMetadata bytes (not in a run dir) -> a part's raw frames: shared by the sources
whose files hold RunMetadata (loose .pb/.pbtxt files, TensorBoard event files).

Each RunMetadata is decoded as a run dir's step files are: by the C decoder where it is
built (it counts empty node stats without making objects of them: 20 MB of them took
2 GB and 5 s walked with protobuf), else by ingest's protobuf walk; a RunMetadata that
cannot be read, its partition graphs included (parsed once per distinct
content, with the first step that carries them, as in a run dir), is skipped with a
warning naming it, and the others are still read. Partition graphs and a GraphDef saved
beside give op types.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import polars as pl
from google.protobuf.message import DecodeError

from .. import ingest, readfile, schema
from ..errors import InputFileError, RunDirError
from . import Part, SourceFrames, damage
from .stepnumbers import check_step

MAX_STEP_WARNINGS = 100  # one warning per unreadable step up to this many, then a count
# (global step, serialized RunMetadata, what to call it in messages)
StepBytes = tuple[int, bytes, str]
# (serialized GraphDef, what to call it in messages)
GraphBytes = tuple[bytes, str]


def frames_from_run_metadata(steps: Iterable[StepBytes], graphs: list[GraphBytes], part: Part,
                             warnings: list[str], *, files: str, no_graph: str
                             ) -> SourceFrames:
    """The part's raw frames of these steps (sources.raw_frames completes them); its
    warnings: the caller's `warnings`, then one per step or graph skipped. What it lacks:
    code traces (not in RunMetadata: "not in `files`"), and the graph when neither
    `graphs` nor partition graphs give one (`no_graph`).

    Raises RunDirError naming the part's path when no step can be read."""
    worker, where = part.worker, readfile.shown(part.path)
    warnings = list(warnings)
    parts: list[ingest.StepFrames] = []
    decoder = ingest._stepstats.Decoder() if ingest.native_decoder_available() else None
    parsed = ingest.PartitionGraphs()
    partition: dict[bytes, pl.DataFrame] = {}
    skipped = 0  # steps skipped past MAX_STEP_WARNINGS: counted, not said one by one
    count = 0
    for step, raw, name in steps:
        count += 1
        try:
            check_step(step, name)
            try:
                stats, step_graphs = ingest.split_run_metadata(raw)
            except DecodeError as e:
                raise InputFileError(f"{name}: not a readable RunMetadata ({e})"
                                     + damage.hint(raw)) from None
            graphs_of_step = {}
            for g in step_graphs:
                digest = hashlib.blake2b(g, digest_size=16).digest()
                graphs_of_step[digest] = parsed.nodes(digest, bytes(g), name)
            walked = _step(stats, step, name, decoder)
            if walked is not None:
                parts.append(walked)
        except InputFileError as e:
            skipped += 1
            if skipped <= MAX_STEP_WARNINGS:
                warnings.append(str(e))
            continue
        for digest, frame in graphs_of_step.items():
            partition.setdefault(digest, frame)
    if skipped > MAX_STEP_WARNINGS:
        warnings.append(f"{where}: {skipped - MAX_STEP_WARNINGS:,} more unreadable steps "
                        "skipped")
    if decoder is not None:
        parts.insert(0, ingest.decoded_frames(decoder.finish()))
    parts = [p for p in parts if p.nodes.height]
    if not parts:
        if count == 1 and len(warnings) == 1:  # one file: its own problem, said once
            raise InputFileError(warnings[0])
        first = next((w for w in warnings if not w.startswith(where + ":")), None)
        raise RunDirError(f"{where}: no readable RunMetadata ({skipped or len(warnings)} "
                          f"skipped; first: {first or (warnings[0] if warnings else 'none')})")
    graph_frames = []
    for raw, name in graphs:
        try:
            graph_frames.append(ingest.ingest_graph_defs([raw], name, "graph"))
        except InputFileError as e:
            warnings.append(f"{e}; op types come from partition graphs and timeline labels")
    graph_frames += partition.values()
    graph_nodes = (pl.concat(graph_frames, how="vertical") if graph_frames
                   else pl.DataFrame(schema=schema.GRAPH_NODE_SCHEMA))
    graph_nodes = graph_nodes.unique(subset=["name", "source", "device"], keep="first",
                                     maintain_order=True)
    merged = ingest.concat_step_frames(parts)
    lit = pl.lit(worker).alias("worker")
    frames = {
        "executions": merged.nodes,
        "keys": merged.keys.select(lit, pl.all()),
        "output_rows": merged.outputs,
        "output_keys": merged.output_keys.select(lit, pl.all()),
        "memory": merged.memory,
        "allocations": merged.allocations,
        "threads": merged.threads,
        "graph_nodes": graph_nodes,
    }
    lacks = {"code": f"not in {files} (tfprof's op log holds code traces)"}
    if graph_nodes.height == 0:
        lacks["graph"] = no_graph
    return SourceFrames(frames, warnings, lacks)


def _step(stats: ingest.Buffer, step: int, name: str, decoder: Any
          ) -> ingest.StepFrames | None:
    """One step: its rows added to `decoder` (None returned) or, where the C decoder
    does not accept it or is not built, walked with protobuf (which decides whether it is
    valid). InputFileError when it has no node stats."""
    devices = decoder.add(stats, step) if decoder is not None else None
    if devices is None:
        frames = ingest.walk_step_bytes(stats, step, name)
        nodes = frames.nodes.height
    elif not devices:
        raise InputFileError(f"{name}: RunMetadata has no step_stats (was it traced?)")
    else:
        frames, nodes = None, decoder.added
    if not nodes:
        raise InputFileError(f"{name}: step {step} has no node stats; left out")
    return frames

"""Loose RunMetadata files: what users saved by hand from `session.run(...,
run_metadata=md)`: `md.SerializeToString()` (binary, e.g. run_metadata.pb) or
`text_format`/`str(md)` (text, e.g. run_metadata.pbtxt); one file, or a folder of them
with any names, with an optional GraphDef beside (binary or text; a file whose name has
"graph" in it).

Which file is which is told by content: text files by their first field (`step_stats` /
`node`), binary files by parsing (a RunMetadata's step stats name devices "/..."), or by
name ("run_metadata", "run-meta..."): so a damaged one is reported, not passed by. A
file's step is the last number in its name (in file order when it has none, or when two
names give the same number). Not in these files: the code traces of tfprof's op log
(`lacks`), and the graph when none is beside and the steps hold no partition graphs.
"""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from .. import ingest, readfile
from ..errors import InputFileError, RunDirError
from ..proto import config_pb2, graph_pb2
from . import Part, Progress, Selection, SourceFrames
from .stepnumbers import by_number, distinct_steps, number_in
from .stepstats import frames_from_run_metadata

SUFFIXES = (".pb", ".pbtxt", ".pb.txt", ".txt", ".textproto")
_TEXT_FIRST_FIELD = re.compile(rb"^\s*(?:#[^\n]*\n\s*)*([a-z_]+)\s*[{:<]")
# A binary file named like this is taken for RunMetadata even when it does not parse, so
# that a truncated or damaged one is reported (one line naming it) instead of ignored.
_NAMED_RUN_METADATA = re.compile(r"run[_-]?meta")  # not "metadata": keras_metadata.pb


def _suffixed(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def _has_suffix(path: Path) -> bool:
    return _suffixed(path.name) and readfile.regular(path)


def _read(path: Path) -> bytes:
    return readfile.read_bytes(path, what="RunMetadata")


def _text_field(raw: bytes) -> str | None:
    """The first field of a text-format message, or None if `raw` is not text."""
    m = _TEXT_FIRST_FIELD.match(raw[:4096])
    return m.group(1).decode() if m else None


def _is_run_metadata(raw: bytes) -> bool:
    """Step stats whose first device is named "/...": read from the wire, not parsed
    whole (a file of empty partition graphs or node stats would make GBs of objects)."""
    try:
        stats, _ = ingest.split_run_metadata(raw)
        device = next((bytes(d) for n, d in ingest.split_fields(stats) if n == 1), None)
        if device is None:
            return False
        name = next((bytes(v) for n, v in ingest.split_fields(device) if n == 1), b"")
    except (DecodeError, IndexError):  # IndexError: a varint cut short
        return False
    return name.startswith(b"/")


def kind_of(path: Path) -> str | None:
    """"run_metadata", "graph" or None (neither) for one file."""
    raw = _read(path)
    field = _text_field(raw)
    if field is not None:
        return {"step_stats": "run_metadata", "cost_graph": "run_metadata",
                "partition_graphs": "run_metadata", "node": "graph",
                "versions": "graph", "library": "graph"}.get(field)
    name = path.name.lower()
    if "graph" in name:
        return "graph"
    if _is_run_metadata(raw) or _NAMED_RUN_METADATA.search(name):
        return "run_metadata"
    return None


def message_bytes(path: Path, message: type) -> bytes:
    """The file as serialized `message` (text format parsed); InputFileError if it is not."""
    raw = _read(path)
    if _text_field(raw) is None:
        return raw
    try:
        return text_format.Parse(raw.decode(), message()).SerializeToString()
    except (text_format.ParseError, ValueError, RecursionError) as e:  # UnicodeDecodeError
        first = ("nested too deeply" if isinstance(e, RecursionError) else
                 str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise InputFileError(f"{readfile.shown(path)}: not a readable text-format "
                             f"{message.__name__} ({first})") from None


class RunMetadataSource:
    kind = "runmetadata"
    files = "RunMetadata .pb/.pbtxt"  # what the not-a-profile error names
    description = ("loose RunMetadata files (binary .pb or text .pbtxt), one or a folder "
                   "of them, with an optional graph.pb/graph.pbtxt beside")

    def accepts(self, path: Path) -> bool:
        try:
            if path.is_dir():
                return any(_has_suffix(p) and kind_of(p) == "run_metadata"
                           for p in sorted(path.iterdir()))
            return _has_suffix(path) and kind_of(path) == "run_metadata"
        except InputFileError:
            return False

    def parts(self, path: Path, chosen: Selection) -> list[Part]:
        folder = path if path.is_dir() else path.parent
        if not path.exists():
            raise RunDirError(f"{readfile.shown(path)}: no such file or directory")
        candidates, problems = readfile.scan(folder, _suffixed)
        if not path.is_dir():
            problems = []  # the folder beside a lone file is not what was asked for
        steps, graphs = [], []
        for p in candidates:
            try:
                kind = kind_of(p)
            except InputFileError:
                kind = "run_metadata" if path.is_dir() else None  # reported when read
            if kind == "graph":
                graphs.append(p)
            elif kind == "run_metadata" and (path.is_dir() or p == path):
                steps.append(p)
        if path.is_file() and path not in steps:
            steps = [path]  # forced with --source: read it, and say why not if it is not
        if not steps:
            raise RunDirError(f"{readfile.shown(path)}: no RunMetadata file (.pb or .pbtxt)"
                              + (f" ({problems[0]})" if problems else ""))
        files = (*(str(p) for p in steps), *(str(p) for p in graphs))
        return [Part(self.kind, path, "worker:0", files, detail=(steps, graphs),
                     warnings=tuple(problems))]

    def read(self, part: Part, jobs: int, progress: Progress | None) -> SourceFrames:
        steps, graphs = part.detail
        warnings: list[str] = []
        items = []
        numbered = by_number(steps)
        for p, step in zip(numbered, distinct_steps(number_in(p.name) for p in numbered),
                           strict=True):
            try:
                items.append((step, message_bytes(p, config_pb2.RunMetadata), str(p)))
            except InputFileError as e:
                if len(numbered) == 1:
                    raise
                warnings.append(str(e))
        graph_items = []
        for p in graphs:
            try:
                graph_items.append((message_bytes(p, graph_pb2.GraphDef), str(p)))
            except InputFileError as e:
                warnings.append(f"{e}; op types come from timeline labels")
        return frames_from_run_metadata(
            items, graph_items, part, warnings, files="RunMetadata files",
            no_graph="no graph.pb or graph.pbtxt beside the RunMetadata")


SOURCE = RunMetadataSource()

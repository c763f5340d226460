"""A tree view as a pprof profile: gzipped perftools profile.proto (analyzer/proto).

Sample types: time (microseconds, the default) and memory (requested bytes). One
location and function per distinct frame name; each displayed node is one sample whose
location ids go leaf first, as pprof wants (analyzer.render.stacks). Open it with
`go tool pprof -http=: FILE`, or any viewer that reads pprof (speedscope, Perfetto,
Pyroscope...).
"""

from __future__ import annotations

import gzip

from ..analysis.views import View
from ..proto import profile_pb2
from .stacks import SAMPLE_TYPES, Frame, frame, stacks


def view_pprof(view: View) -> bytes:
    profile = profile_pb2.Profile()
    strings: dict[str, int] = {"": 0}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    for kind, unit in SAMPLE_TYPES.values():
        profile.sample_type.add(type=s(kind), unit=s(unit))
    profile.default_sample_type = s(next(iter(SAMPLE_TYPES.values()))[0])
    locations: dict[Frame, int] = {}
    for names, values in stacks(view, "pprof"):
        ids = []
        for name in reversed(names):  # leaf first
            f = frame(view.kind, name)
            loc = locations.get(f)
            if loc is None:
                loc = locations[f] = len(locations) + 1
                profile.function.add(id=loc, name=s(f.name), system_name=s(f.name),
                                     filename=s(f.file or ""), start_line=f.line or 0)
                profile.location.add(id=loc).line.add(function_id=loc, line=f.line or 0)
            ids.append(loc)
        profile.sample.add(location_id=ids, value=[values[m] for m in SAMPLE_TYPES])
    profile.comment.append(s(f"runlens {view.kind} view"))
    profile.string_table.extend(strings)
    return gzip.compress(profile.SerializeToString(), mtime=0)

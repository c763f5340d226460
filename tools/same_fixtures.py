"""Check that regenerated fixtures are the committed ones in substance, after a change to
a generator: graph.pb nodes (name, op, inputs, device; as a set and in order), the traced
step numbers, and the node names in the steps' step_stats. Timings are not compared.

usage: python fixtures/generate.py --out /tmp/new/runs --compare-out /tmp/new/compare --only ...
       python tools/same_fixtures.py /tmp/new fixtures
Exit 1 when graph nodes or step numbers differ (a step_stats name difference is printed only:
it follows the capture hook, which fixtures captured before a hook change do not share).
"""
import sys
from pathlib import Path

from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2


def nodes(d: Path):
    g = graph_pb2.GraphDef.FromString((d / "graph.pb").read_bytes())
    return [(n.name, n.op, tuple(n.input), n.device) for n in g.node]


def steps(d: Path):
    files = sorted((d / "steps").glob("step-*.pb"))
    names = set()
    for f in files:
        md = config_pb2.RunMetadata.FromString(f.read_bytes())
        names |= {n.node_name for dev in md.step_stats.dev_stats for n in dev.node_stats}
    return [f.name for f in files], names


ok = True
for new in sorted(Path(sys.argv[1]).glob("*/*")):
    if not (new / "graph.pb").exists():
        continue
    old = Path(sys.argv[2]) / new.parent.name / new.name
    if not (old / "graph.pb").exists():
        print(f"{new.parent.name}/{new.name:16s} not in {sys.argv[2]}: not compared")
        continue
    a, b = nodes(old), nodes(new)
    sa, na = steps(old)
    sb, nb = steps(new)
    same_nodes = set(a) == set(b)
    same_order = a == b
    same_steps = sa == sb
    same_stat_names = na == nb
    ok &= same_nodes and same_steps
    print(f"{new.parent.name}/{new.name:16s} nodes {len(a):4d} vs {len(b):4d} "
          f"same={same_nodes} order={same_order} | steps {len(sa):2d} vs {len(sb):2d} "
          f"same_numbers={same_steps} | step_stats names {len(na)} vs {len(nb)} "
          f"same={same_stat_names}")
    if not same_nodes:
        print("   only old:", sorted(set(a) - set(b))[:5])
        print("   only new:", sorted(set(b) - set(a))[:5])
    if not same_stat_names:
        print("   stat names only old:", sorted(na - nb)[:8])
        print("   stat names only new:", sorted(nb - na)[:8])
print("ALL SAME" if ok else "DIFFERENCES")
sys.exit(0 if ok else 1)

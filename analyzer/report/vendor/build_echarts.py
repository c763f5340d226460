"""Rebuild echarts.min.js: Apache ECharts with only the charts the report draws.

Usage (needs node and npm, and the npm registry; not needed to use runlens)::

    python analyzer/report/vendor/build_echarts.py

Installs ECHARTS and ESBUILD (pinned) from the npm registry into a temporary directory,
bundles `echarts/core` with the charts and components listed in ENTRY (tree-shaken,
minified, an IIFE that sets `window.echarts`), and writes echarts.min.js, ECharts'
LICENSE and NOTICE and a manifest (versions and sha256) beside this file. The output is
deterministic for the pinned versions. Why a partial build: the full echarts.min.js is
1.12 MB, this one 0.73 MB, and every report page embeds it (docs/report.md).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ECHARTS = "6.1.0"
ESBUILD = "0.28.2"
HERE = Path(__file__).resolve().parent
ENTRY = """
import * as echarts from 'echarts/core';
import { LineChart, BarChart, ScatterChart, BoxplotChart, SunburstChart, TreemapChart,
         CustomChart } from 'echarts/charts';
import { GridComponent, TooltipComponent, TitleComponent, LegendComponent,
         DataZoomComponent, MarkLineComponent, MarkPointComponent, MarkAreaComponent,
         DatasetComponent } from 'echarts/components';
import { CanvasRenderer } from 'echarts/renderers';
echarts.use([LineChart, BarChart, ScatterChart, BoxplotChart, SunburstChart, TreemapChart,
             CustomChart, GridComponent, TooltipComponent, TitleComponent, LegendComponent,
             DataZoomComponent, MarkLineComponent, MarkPointComponent, MarkAreaComponent,
             DatasetComponent, CanvasRenderer]);
window.echarts = echarts;
"""


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="runlens-echarts-") as tmp:
        work = Path(tmp)
        (work / "package.json").write_text('{"name": "runlens-echarts", "private": true}')
        (work / "entry.js").write_text(ENTRY)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts=false",
                        f"echarts@{ECHARTS}", f"esbuild@{ESBUILD}"], cwd=work, check=True)
        out = work / "echarts.min.js"
        subprocess.run([str(work / "node_modules/.bin/esbuild"), "entry.js", "--bundle",
                        "--minify", "--format=iife", "--legal-comments=none",
                        f"--outfile={out}"], cwd=work, check=True)
        banner = (f"/*! Apache ECharts {ECHARTS} (partial build by runlens, "
                  "analyzer/report/vendor/build_echarts.py). Apache License 2.0: see "
                  "LICENSE-echarts, NOTICE-echarts and LICENSE-zrender. */\n")
        data = banner.encode() + out.read_bytes()
        (HERE / "echarts.min.js").write_bytes(data)
        shutil.copyfile(work / "node_modules/echarts/LICENSE", HERE / "LICENSE-echarts")
        shutil.copyfile(work / "node_modules/echarts/NOTICE", HERE / "NOTICE-echarts")
        # ECharts draws with zrender (BSD-3-Clause), bundled in the same file.
        shutil.copyfile(work / "node_modules/zrender/LICENSE", HERE / "LICENSE-zrender")
    manifest = {"echarts": ECHARTS, "esbuild": ESBUILD, "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}
    (HERE / "echarts.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {HERE / 'echarts.min.js'} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Open a report page in headless Debian chromium (through playwright, no browser download)
and say what a person would see: script errors, requests, drawn charts, a screenshot.

Also makes the screenshots in docs/:
    python -m tests.report_browser            (writes docs/report-run.png, docs/report-compare.png)
"""

from __future__ import annotations

import io
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Per chart container: is there a canvas (or svg), and how much do its pixels vary?
_CHARTS_JS = """() => Array.from(document.querySelectorAll('div.chart')).map(el => {
  const canvas = el.querySelector('canvas');
  let variance = 0;
  if (canvas) {
    const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0, sum = 0, sq = 0;
    for (let i = 0; i < px.length; i += 4 * 7) {  // every 7th pixel, grey level
      const g = (px[i] + px[i + 1] + px[i + 2]) / 3 * px[i + 3] / 255;
      n++; sum += g; sq += g * g;
    }
    variance = n ? sq / n - (sum / n) ** 2 : 0;
  }
  return {id: el.id, canvas: !!canvas, svg: !!el.querySelector('svg'),
          drawn: el.getAttribute('data-drawn') === '1', variance: variance,
          height: el.getBoundingClientRect().height};
})"""


def chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageCheck:
    errors: list[str] = field(default_factory=list)  # uncaught exceptions, console errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    charts: list[dict] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    screenshot: bytes = b""

    @property
    def screenshot_stdev(self) -> float:
        """Standard deviation of the screenshot's grey levels (0 for a blank page)."""
        from PIL import Image

        image = Image.open(io.BytesIO(self.screenshot)).convert("L")
        image.thumbnail((400, 4000))
        return statistics.pstdev(image.tobytes())


def open_page(path: Path, width: int = 1280, full_page: bool = True) -> PageCheck:
    """Load `path` (file://) in headless chromium and check it as a person would."""
    from playwright.sync_api import sync_playwright

    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed")
    check = PageCheck()
    with tempfile.TemporaryDirectory(prefix="runlens-chromium-") as profile, \
            sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=exe, args=ARGS, headless=True,
            viewport={"width": width, "height": 900})
        try:
            page = browser.new_page()
            page.on("pageerror", lambda e: check.errors.append(f"uncaught: {e}"))
            page.on("console", lambda m: check.errors.append(f"console.{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("request", lambda r: check.requests.append(r.url))
            page.goto(path.resolve().as_uri(), wait_until="load")
            page.wait_for_function(
                "document.documentElement.hasAttribute('data-charts-drawn')", timeout=20_000)
            check.charts = page.evaluate(_CHARTS_JS)
            check.sections = page.evaluate(
                "() => Array.from(document.querySelectorAll('section')).map(s => s.id)")
            check.screenshot = page.screenshot(full_page=full_page)
        finally:
            browser.close()
    return check


def _save_small(png: bytes, path: Path) -> None:
    """A screenshot in 256 colours (a third of the bytes; charts have few colours)."""
    from PIL import Image

    Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(path, optimize=True)


def main() -> int:
    """Write the README's screenshots of the cnn report and of a comparison."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    analyze = [sys.executable, "-c", "from runlens import cli; cli.main()"]
    with tempfile.TemporaryDirectory() as tmp:
        pages = {
            "report-run.png": [*analyze, "report", "fixtures/runs/cnn", "-o", f"{tmp}/r.html"],
            "report-compare.png": [*analyze, "compare", "fixtures/compare/base_a",
                                   "fixtures/compare/slow_dense2", "--format", "html",
                                   "-o", f"{tmp}/c.html"],
        }
        for png, cmd in pages.items():
            subprocess.run(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                           check=False)
            html = Path(cmd[-1])
            check = open_page(html)
            if check.errors:
                print(f"{html}: {check.errors}", file=sys.stderr)
                return 1
            _save_small(check.screenshot, root / "docs" / png)
            print(f"wrote docs/{png} ({(root / 'docs' / png).stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

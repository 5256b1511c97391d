"""Screenshots of report pages as a reader sees them: headless Chromium at 1400 px, the whole
page, cut into screen-high tiles to look at one by one.

Usage::

    python scripts/screenshot_reports.py runs/demo/report.html runs/eval/report.html --out runs/screens

Needs Chromium (Debian: ``apt-get install chromium``) and Pillow (a matplotlib dependency).
Writes ``OUT/<report folder>-full.png`` and ``OUT/<report folder>-NN.png`` tiles; prints them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

WIDTH = 1400
TILE = 1000


def page_height(browser: str, page: Path) -> int:
    """The page's height in CSS pixels at ``WIDTH`` (Chromium prints the laid-out DOM)."""
    probe = ("<script>window.onload=()=>{document.title=String(document.documentElement.scrollHeight)}</script>")
    with tempfile.NamedTemporaryFile("w", suffix=".html", dir=page.parent, delete=False) as handle:
        handle.write(page.read_text().replace("</body>", probe + "</body>"))
    try:
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},{TILE}",
                              "--virtual-time-budget=5000", "--dump-dom", f"file://{handle.name}"],
                             capture_output=True, text=True, timeout=120).stdout
    finally:
        Path(handle.name).unlink()
    title = dom.split("<title>")[1].split("</title>")[0] if "<title>" in dom else ""
    return int(title) if title.isdigit() else 6000


def screenshot(browser: str, page: Path, out: Path) -> list[Path]:
    from PIL import Image

    name = page.parent.name or page.stem
    full = out / f"{name}-full.png"
    height = page_height(browser, page)
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WIDTH},{height}", "--virtual-time-budget=5000", f"--screenshot={full}",
                    f"file://{page.resolve()}"], capture_output=True, timeout=120, check=True)
    image = Image.open(full)
    tiles = []
    for i, top in enumerate(range(0, image.height, TILE)):
        tile = out / f"{name}-{i:02d}.png"
        image.crop((0, top, image.width, min(top + TILE, image.height))).save(tile)
        tiles.append(tile)
    return [full, *tiles]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="+", type=Path, help="report.html files")
    parser.add_argument("--out", type=Path, default=Path("runs/screens"), help="folder for the PNGs")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("no Chromium found (Debian: apt-get install chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    for page in args.pages:
        if not page.is_file():
            raise SystemExit(f"no such page: {page}")
        for path in screenshot(browser, page, args.out):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every ```python block of README.md and docs/ runs (blocks of one file share a namespace, in
order, like a reader's session). A block right after an HTML comment starting ``<!-- slow``
runs only with ``pytest -m slow``."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^(<!-- slow[^\n]*-->\n)?```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(path: Path) -> list[tuple[bool, str]]:
    return [(bool(m.group(1)), m.group(2)) for m in BLOCK.finditer(path.read_text(encoding="utf-8"))]


DOCS = [p for p in FILES if blocks(p)]


def run_blocks(path: Path, tmp_path: Path, include_slow: bool) -> int:
    namespace: dict = {"__name__": f"doc:{path.name}"}
    cwd = os.getcwd()
    os.chdir(tmp_path)  # blocks write under runs/
    ran = 0
    try:
        for number, (slow, code) in enumerate(blocks(path), 1):
            if slow and not include_slow:
                continue
            exec(compile(code, f"{path.relative_to(ROOT)} block {number}", "exec"), namespace)
            ran += 1
    finally:
        os.chdir(cwd)
    return ran


def test_the_readme_has_a_python_block():
    assert blocks(ROOT / "README.md")


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_doc_python_blocks_run(path, tmp_path):
    assert run_blocks(path, tmp_path, include_slow=False) >= 1 or all(slow for slow, _ in blocks(path))


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_doc_python_blocks_run_including_slow_ones(path, tmp_path):
    assert run_blocks(path, tmp_path, include_slow=True) == len(blocks(path))

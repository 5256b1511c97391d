"""Help texts and docs tell the truth: every file they name exists, no internal issue number,
every registered task listed where tasks are listed, no "(default: )" glitches, sibling commands'
defaults agree, and the measured demo times are the recorded numbers."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from vpo.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
TOP = ("src", "docs", "tests", "scripts", "recipes", "benchmarks", "examples", "notes")
"""A path in prose that starts with one of these folders names a file of this repository."""
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*[\w/])" % "|".join(TOP))
LINK = re.compile(r"\]\(([^)#\s]+)")
ISSUE = re.compile(r"issue #\d|issues #\d|pre-#\d|\(#\d+(?:\.\d+)?\)|#\d+\.\d+")


def help_texts() -> dict[str, str]:
    """{"vpo eval": its --help text, ...} for every command and sub-command."""
    out = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        out[name] = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(child, f"{name} {sub}")

    walk(build_parser(), "vpo")
    return out


def docs() -> dict[str, str]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "recipes").rglob("*.md"))]
    return {str(p.relative_to(ROOT)): p.read_text() for p in files}


def _missing(text: str, base: Path) -> list[str]:
    missing = []
    for name in PATH.findall(text):
        name = name.rstrip(".")
        if "*" in name or "<" in name or not (name.endswith("/") or "." in name.rsplit("/", 1)[-1]):
            continue  # a file has an extension, a folder a trailing slash ("tests/s" is a rate)
        if not (ROOT / name).exists() and not (ROOT / "src" / "vpo" / name).exists():
            missing.append(name)
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (base / target).exists():
            missing.append(target)
    return missing


def test_help_texts_and_docs_name_no_missing_file():
    found = {}
    for name, text in help_texts().items():
        found.update({f"{name} --help: {m}": 1 for m in _missing(text, ROOT)})
    for name, text in docs().items():
        found.update({f"{name}: {m}": 1 for m in _missing(text, (ROOT / name).parent)})
    assert not found, sorted(found)


def test_the_file_check_sees_a_missing_file(tmp_path):
    assert _missing("as notes/engines.md §5 says; see [the log](nowhere.md)", tmp_path) == [
        "notes/engines.md", "nowhere.md"]
    assert _missing("see docs/search.md, src/vpo/report.py and recipes/verl/ at 187 tests/s", ROOT) == []
    assert _missing("see recipes/nowhere/", ROOT) == ["recipes/nowhere/"]


def test_no_internal_issue_numbers_in_help_or_docs():
    texts = {f"{k} --help": v for k, v in help_texts().items()} | docs()
    hits = {name: ISSUE.findall(text) for name, text in texts.items() if ISSUE.search(text)}
    assert not hits, hits


def test_every_task_list_names_every_registered_task():
    from vpo.tasks import list_tasks

    helps = help_texts()
    for command in ("vpo train", "vpo eval", "vpo data export", "vpo search best-of-n"):
        # argparse wraps lines at hyphens too: "toy-\n    contract" is one name
        listed = re.sub(r"-\n\s*", "-", helps[command]).replace("\n", " ")
        assert all(task in listed for task in list_tasks()), command
    assert "math" in helps["vpo train"] and "math" in helps["vpo data export"]


def test_no_empty_or_doubled_defaults_in_help():
    for name, text in help_texts().items():
        flat = " ".join(text.split())
        assert "(default: )" not in flat and "(default: None)" not in flat, name
        assert not re.search(r"default[^()]*\) \(default: ", flat), name
        assert "; default )" not in flat and "default )" not in flat, name


def test_sibling_commands_share_defaults():
    from vpo.commands.advantages import AdvantagesConfig
    from vpo.commands.eval import EvalConfig
    from vpo.commands.search import BestOfNConfig
    from vpo.commands.train import TrainArgs

    eval_cfg, best = EvalConfig(), BestOfNConfig()
    for name in ("examples", "max_new_tokens", "pool", "temperature", "top_p", "split", "seed"):
        assert getattr(eval_cfg, name) == getattr(best, name), name
    assert AdvantagesConfig().answers == TrainArgs().answers  # both: by the estimator (3 or 1)


def test_demo_help_and_readme_state_the_measured_times():
    from vpo.demo.config import MEASURED_RUNS, measured_time

    demo_help = " ".join(help_texts()["vpo demo"].split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    for kind in MEASURED_RUNS:
        assert measured_time(kind) in demo_help and measured_time(kind) in readme, kind
    assert "about " not in demo_help.split("options:")[0]  # no hand-typed estimate left
    assert "adds Multi-RLVR and Max@K" not in demo_help  # the four methods are the default


@pytest.mark.parametrize("seconds,load,text", [(879, None, "14 min 39 s on 2 idle cores"),
                                               (41, 0.8, "41 s on 2 cores at load average 0.8"),
                                               (60, 0.2, "1 min 0 s on 2 idle cores")])
def test_measured_time_words(monkeypatch, seconds, load, text):
    from vpo.demo import config

    monkeypatch.setitem(config.MEASURED_RUNS, "quick", {"seconds": seconds, "cpus": 2, "load": load, "workers": 2})
    assert config.measured_time("quick") == text


def test_the_report_reads_the_load_average():
    from vpo.demo.run import load_note

    assert "otherwise idle" in load_note(2, 2, 1, 0.2, 0.3)
    assert "otherwise idle" in load_note(2, 2, 1, 0.2, 2.1)  # the end counts the run's own two workers
    assert "other work shared the CPUs" in load_note(2, 2, 1, 3.1, 3.3)

"""Shared loaders (vpo.tasks.io) and text helpers (vpo.tasks.text)."""

import gzip
import json
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.tasks.io import load_json_rows, load_records, need, resolve_path, select
from vpo.tasks.text import (all_tags, last_tag, max_token_f1, multiset_f1, normalize_answer, normalize_entity,
                            parse_indices, set_f1, token_f1)

ROWS = [{"id": "a", "x": 1}, {"id": "b", "x": [1, 2]}, {"id": "c", "x": {"k": None}}]


# ----- loaders ---------------------------------------------------------------------------
def test_jsonl_json_array_object_and_json_lines(tmp_path):
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    (tmp_path / "arr.json").write_text(json.dumps(ROWS))
    (tmp_path / "obj.json").write_text(json.dumps({"meta": 1, "data": ROWS}))
    (tmp_path / "lines.json").write_text("\n".join(json.dumps(r) for r in ROWS))  # BFCL style
    with gzip.open(tmp_path / "z.jsonl.gz", "wt") as handle:
        handle.write("\n".join(json.dumps(r) for r in ROWS))
    for name in ("r.jsonl", "arr.json", "obj.json", "lines.json", "z.jsonl.gz"):
        assert load_records(str(tmp_path / name)) == ROWS, name


def test_parquet(tmp_path):
    rows = [{"id": "a", "x": [1, 2], "y": {"k": "v"}}, {"id": "b", "x": [], "y": {"k": "w"}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    assert load_records(tmp_path / "t.parquet") == rows


def test_directories_split_aliases_and_templates(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps(ROWS[0]))
    (tmp_path / "validation.json").write_text(json.dumps([ROWS[1]]))
    assert load_records(str(tmp_path), "train") == [ROWS[0]]
    assert load_records(str(tmp_path), "test") == [ROWS[1]]  # test -> validation
    (tmp_path / "musique_dev.jsonl").write_text(json.dumps(ROWS[2]))
    assert load_records(str(tmp_path / "musique_{split}.jsonl"), "dev") == [ROWS[2]]
    with pytest.raises(FileNotFoundError, match="no file for split 'other'"):
        load_records(str(tmp_path), "other")
    assert resolve_path("some-org/some-dataset", "train") is None  # a hub name


def test_missing_paths_and_bad_json(tmp_path):
    for missing in (str(tmp_path / "nope.jsonl"), "./nope.parquet", "nope.json", "~/definitely/not/here.jsonl"):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            load_records(missing, "train")
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{broken\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        load_records(str(tmp_path / "bad.jsonl"))
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_json_rows(tmp_path / "bad.json")
    (tmp_path / "data.txt").write_text("x")
    with pytest.raises(ValueError, match="unknown file type"):
        load_records(str(tmp_path / "data.txt"))


def _fake_datasets(monkeypatch, load_dataset):
    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)


def test_hub_names_load_lazily_with_config_and_split(monkeypatch):
    calls = []

    def load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return ROWS

    _fake_datasets(monkeypatch, load_dataset)
    assert load_records("org/name:cfg", "validation") == ROWS
    assert load_records("org/name") == ROWS
    assert calls == [("org/name", "cfg", "validation"), ("org/name", None, "train")]


def test_hub_failure_offline_is_a_clear_error(monkeypatch):
    def load_dataset(name, config=None, split=None):
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    _fake_datasets(monkeypatch, load_dataset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"'org/name'.*HF_HUB_OFFLINE is set.*local") as err:
        load_records("org/name", "train")
    assert "ConnectionError" in str(err.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(ValueError, match="if the hub is unreachable"):
        load_records("org/name", "train")


def test_select_is_reproducible():
    rows = list(range(20))
    assert select(rows) == rows and select(rows, 3) == [0, 1, 2]
    a = select(rows, 5, seed=3)
    assert a == select(rows, 5, seed=3) and a != select(rows, 5, seed=4) and len(set(a)) == 5
    assert sorted(select(rows, None, seed=1)) == rows and select(rows, 100) == rows
    assert select(rows, 0, seed=1) == []
    with pytest.raises(ValueError):
        select(rows, -1)


def test_need_messages():
    row = {"a": 1, "b": True, "c": {"d": "x"}}
    assert need(row, "a", int, "t", 3) == 1
    with pytest.raises(ValueError, match=r"t: row 3: missing field 'z'"):
        need(row, "z", int, "t", 3)
    with pytest.raises(ValueError, match=r"t: row 3: field 'b' must be int, got bool"):
        need(row, "b", int, "t", 3)
    assert need(row, "b", (int, bool), "t", 3) is True
    with pytest.raises(ValueError, match=r"row 0: field 'c.d' must be int/float, got str"):
        need(row["c"], "d", (int, float), "t", 0, "c")
    with pytest.raises(ValueError, match=r"row 0: field 'c' must be a mapping"):
        need("x", "d", str, "t", 0, "c")


# ----- text helpers ----------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("The Eiffel  Tower!", "eiffel tower"), ("A cat, an owl", "cat owl"), ("theatre", "theatre"),
    ("  ", ""), (None, ""), (42, "42"), ("Ünïcode  Ça", "ünïcode ça"), ("U.S.A.", "usa"),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_normalize_entity():
    assert normalize_entity("From_Dusk_till_Dawn:_The_Series") == "from dusk till dawn series"
    assert normalize_entity("Ada_Lovelace") == normalize_entity(" ada  lovelace ")


def test_f1_family():
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0 and token_f1("", "x") == 0.0
    assert token_f1("the cat sat", "cat sat down") == pytest.approx(0.8)
    assert token_f1("a a b", "a b b") == pytest.approx(2 / 3)  # multiset overlap 2
    assert max_token_f1("Paris", ["London", "paris."]) == 1.0 and max_token_f1("x", []) == 0.0
    assert multiset_f1([], []) == 1.0 and multiset_f1(["a"], []) == 0.0
    assert multiset_f1(["a", "a"], ["a"]) == pytest.approx(2 / 3)
    assert set_f1(["a", "a"], ["a"]) == 1.0 and set_f1([], []) == 1.0 and set_f1(["b"], ["a"]) == 0.0


def test_tags_and_indices():
    text = "<a>1</a> x <a> 2 </a><a>open"
    assert all_tags(text, "a") == ["1", "2"] and last_tag(text, "a") == "2"
    assert last_tag("<a>x</a></a>", "a") == "x" and last_tag("</a><a>", "a") is None
    assert last_tag("<A>Up</a>", "a", ignore_case=True) == "Up" and last_tag("<A>Up</a>", "a") is None
    assert last_tag("İ<A>ok</A>", "a", ignore_case=True) == "ok"  # lowering keeps positions
    assert all_tags("<a>x<a>y</a>", "a") == ["y"] and all_tags(None, "a") == [] and last_tag(3, "a") is None
    assert parse_indices("3, 7 and [12]; 3") == [3, 7, 12, 3]
    assert parse_indices("1" * 5000 + ", 4") == [4] and parse_indices(None) == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=60))
def test_fuzz_text_helpers_total(a, b):
    assert 0.0 <= token_f1(a, b) <= 1.0
    assert normalize_answer(normalize_answer(a)) == normalize_answer(a)
    for tag in ("a", "answer"):
        assert all(isinstance(x, str) for x in all_tags(a + b, tag, ignore_case=True))
        last = last_tag(a + b, tag)
        assert last is None or isinstance(last, str)
    assert all(i >= 0 for i in parse_indices(a))

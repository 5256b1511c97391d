"""MuSiQue task: per-hop citation rewards, answer F1, prompts, chains, data validation."""

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpo.tasks import get_task
from vpo.tasks.musique import FIXTURE, MAX_CITATIONS, hop_count, hop_stratified
from vpo.tasks.text import first_tag, last_tag, parse_comma_indices, parse_indices, pick_tag

TASK = get_task("musique")                                  # block="first", citations="comma"
LENIENT = get_task("musique", block="last", citations="any")
EXAMPLES = TASK.examples("test")
TWO_HOP = next(e for e in EXAMPLES if e["id"].startswith("2hop"))
FOUR_HOP = next(e for e in EXAMPLES if e["id"].startswith("4hop"))


def gold(example):
    return [step["paragraph_support_idx"] for step in example["question_decomposition"]]


def answer(support, text):
    return f"<support>{', '.join(map(str, support))}</support>\n<answer>{text}</answer>"


def test_fixture_loads_and_is_valid():
    assert FIXTURE.is_file()
    assert len(EXAMPLES) == 6
    assert sorted(hop_count(e) for e in EXAMPLES) == [2, 2, 3, 3, 4, 4]
    for example in EXAMPLES:
        assert TASK.num_objectives(example) == 5
        assert TASK.objective_names() == ("hop_1", "hop_2", "hop_3", "hop_4", "answer_f1")


def test_perfect_answer_scores_all_ones():
    for example in EXAMPLES:
        vector = TASK.score(answer(gold(example), example["answer"]), example)
        np.testing.assert_array_equal(vector, np.ones(5))
        assert TASK.scalar(vector) == pytest.approx(1.0)
        assert TASK.solved(vector)


def test_hops_beyond_hop_count_are_one():
    g = gold(TWO_HOP)
    np.testing.assert_array_equal(TASK.score(answer([g[0]], "nothing"), TWO_HOP), [1, 0, 1, 1, 0])
    np.testing.assert_array_equal(TASK.score(answer([], "nothing"), TWO_HOP), [0, 0, 1, 1, 0])
    np.testing.assert_array_equal(TASK.score(answer([g[1]], "x"), TWO_HOP), [0, 1, 1, 1, 0])


def test_hop_order_follows_decomposition():
    g = gold(FOUR_HOP)
    np.testing.assert_array_equal(TASK.score(answer([g[2]], "x"), FOUR_HOP), [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(TASK.score(answer([g[3], g[0]], "x"), FOUR_HOP), [1, 0, 0, 1, 0])


def test_citing_everything_only_counts_the_first_four_distinct():
    g = gold(TWO_HOP)
    others = [p["idx"] for p in TWO_HOP["paragraphs"] if p["idx"] not in g]
    assert MAX_CITATIONS == 4 and len(others) >= 4
    everything = others[:4] + g
    np.testing.assert_array_equal(TASK.score(answer(everything, "x"), TWO_HOP)[:4], [0, 0, 1, 1])
    # repeats do not use up the 4 slots: distinct indices count
    repeated = [others[0]] * 5 + [others[1], g[0], g[1]]
    np.testing.assert_array_equal(TASK.score(answer(repeated, "x"), TWO_HOP)[:4], [1, 1, 1, 1])
    # with citations="any" the slot limit is on indices, whatever the separators (the default
    # "comma" reads no index there: see test_citation_formats)
    assert LENIENT.score(f"<support>[{others[0]}] [{g[0]}] and {g[1]}</support><answer>x</answer>",
                         TWO_HOP)[:2].tolist() == [1, 1]
    assert TASK.score(f"<support>[{others[0]}] [{g[0]}] and {g[1]}</support><answer>x</answer>",
                      TWO_HOP)[:2].tolist() == [0, 0]


def test_answer_f1_and_aliases():
    example = next(e for e in EXAMPLES if e["answer"] == "Ilse Marrow")
    assert TASK.score(answer([], "Marrow"), example)[4] == pytest.approx(2 / 3)
    assert TASK.score(answer([], "The  ILSE marrow."), example)[4] == pytest.approx(1.0)
    assert TASK.score(answer([], "I. Marrow"), example)[4] == pytest.approx(1.0)  # alias
    assert TASK.score(answer([], "Greyfen Press"), example)[4] == 0.0
    river = next(e for e in EXAMPLES if e["answer"] == "River Aske")
    assert TASK.score(answer([], "the Aske"), river)[4] == 1.0  # alias 'Aske' after normalisation


def test_no_parseable_answer_is_the_zero_vector():
    g = gold(TWO_HOP)
    for text in [f"<support>{g[0]},{g[1]}</support>", f"<support>{g[0]}</support><answer> </answer>",
                 f"<support>{g[0]}</support><answer>unclosed", "", "Ilse Marrow", "</answer>x<answer>"]:
        np.testing.assert_array_equal(TASK.score(text, TWO_HOP), np.zeros(5))


def test_last_blocks_are_read():
    # block="last" (an option; the default now reads the first block, as the release)
    g = gold(TWO_HOP)
    text = ("Format: <support>indices</support><answer>short answer</answer>\nReasoning...\n"
            + answer(g, TWO_HOP["answer"]))
    np.testing.assert_array_equal(get_task("musique", block="last").score(text, TWO_HOP), np.ones(5))
    # the default reads the echoed format: no index, answer "short answer"
    np.testing.assert_array_equal(TASK.score(text, TWO_HOP), [0, 0, 1, 1, 0])


def test_scalar_weights_answer_three_times():
    assert TASK.scalar([1, 0, 1, 1, 0.5]) == pytest.approx((3 + 1.5) / 7)
    np.testing.assert_allclose(TASK.scalar(np.array([[0, 0, 0, 0, 1], [1, 1, 1, 1, 0]])), [3 / 7, 4 / 7])


def test_prompts_single_and_multi():
    single = TASK.prompt(FOUR_HOP)
    for p in FOUR_HOP["paragraphs"]:
        assert f"[{p['idx']}] (Title: {p['title']}) {p['paragraph_text']}" in single
    assert f"Question: {FOUR_HOP['question']}" in single
    assert "<support>" in single and "<answer>" in single
    multi = TASK.prompt(FOUR_HOP, m=3)
    assert "<response_1>" in multi and "<response_3>" in multi and "3 genuinely different" in multi
    assert multi.startswith(single.split("Reason step by step")[0])
    for example in EXAMPLES:  # the rewrite pattern matches every prompt
        assert TASK.prompt(example, 2) != TASK.prompt(example, 1)


def test_score_chain_m3_shape_and_dedup():
    g = gold(FOUR_HOP)
    right = f"<support>{','.join(map(str, g))}</support><answer>{FOUR_HOP['answer']}</answer>"
    partial = f"<support>{g[0]}</support><answer>Calder</answer>"
    text = f"<response_1>{right}</response_1>\n<response_2>{partial}</response_2>\n<response_3>{right}</response_3>"
    matrix = TASK.score_chain(text, FOUR_HOP, 3)
    assert matrix.shape == (3, 5)
    np.testing.assert_array_equal(matrix[0], np.ones(5))
    np.testing.assert_allclose(matrix[1], [1, 0, 0, 0, 2 / 3])
    np.testing.assert_array_equal(matrix[2], np.zeros(5))  # duplicate vector dropped, zero-padded
    # different texts with the same vector are duplicates too
    same = f"<support>{g[0]}</support><answer>Calder Fen!</answer>"
    text = f"<response_1>{right}</response_1><response_2>{right.replace('Calder Fen', 'calder fen')}</response_2>"
    assert np.count_nonzero(TASK.score_chain(text, FOUR_HOP, 3).sum(axis=1)) == 1
    assert TASK.score_chain(same, FOUR_HOP, 1).shape == (1, 5)
    np.testing.assert_array_equal(TASK.score_chain("garbage", FOUR_HOP, 3), np.zeros((3, 5)))


def test_examples_n_and_seed():
    assert [e["id"] for e in TASK.examples("train", 2)] == [e["id"] for e in EXAMPLES[:2]]
    a = TASK.examples("train", 3, seed=7)
    assert [e["id"] for e in a] == [e["id"] for e in TASK.examples("train", 3, seed=7)]
    assert len(a) == 3
    assert len(TASK.examples("train", 100)) == 6


def _row():
    return json.loads(FIXTURE.read_text().splitlines()[0])


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda r: r.pop("question"), "'question'"),
    (lambda r: r.update(answer=3), "'answer'"),
    (lambda r: r.update(paragraphs="p"), "'paragraphs'"),
    (lambda r: r.update(paragraphs=[]), "'paragraphs'"),
    (lambda r: r["paragraphs"][1].pop("title"), "'paragraphs[1].title'"),
    (lambda r: r["paragraphs"][0].update(idx="0"), "'paragraphs[0].idx'"),
    (lambda r: r["question_decomposition"][1].pop("paragraph_support_idx"),
     "'question_decomposition[1].paragraph_support_idx'"),
    (lambda r: r["question_decomposition"][0].update(paragraph_support_idx=99),
     "'question_decomposition[0].paragraph_support_idx'"),
    (lambda r: r["question_decomposition"][0].update(paragraph_support_idx=True),
     "'question_decomposition[0].paragraph_support_idx'"),
    (lambda r: r.update(question_decomposition=r["question_decomposition"] * 3), "'question_decomposition'"),
    (lambda r: r.update(answer_aliases=[1]), "'answer_aliases'"),
    (lambda r: r.update(answerable=False), "'answerable'"),
    (lambda r: r.pop("id"), "'id'"),
])
def test_malformed_rows_name_field_and_row(mutate, field):
    row = _row()
    mutate(row)
    with pytest.raises(ValueError, match="row 5") as err:
        TASK.validate(row, 5)
    assert field in str(err.value)


def test_validate_fills_aliases_and_rejects_non_mapping(tmp_path):
    row = _row()
    del row["answer_aliases"]
    assert TASK.validate(row, 0)["answer_aliases"] == []
    with pytest.raises(ValueError, match="row 1"):
        TASK.validate(["not", "a", "row"], 1)
    bad = tmp_path / "bad.jsonl"
    rows = [_row(), _row()]
    del rows[1]["question"]
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=r"row 1: missing field 'question'"):
        TASK.examples("test", source=str(bad))


def _synthetic(prefix, k):
    row = _row()
    row["id"] = f"{prefix}__{k}"
    return row


def test_hop_stratified_selection():
    rows = ([_synthetic("2hop", k) for k in range(120)] + [_synthetic("3hop1", k) for k in range(70)]
            + [_synthetic("3hop2", k) for k in range(60)] + [_synthetic("4hop3", k) for k in range(110)])
    picked = hop_stratified(rows, per_hop=100, seed=0)
    assert len(picked) == 300
    assert [hop_count(r) for r in picked] == [2] * 100 + [3] * 100 + [4] * 100
    assert len({r["id"] for r in picked}) == 300
    assert [r["id"] for r in hop_stratified(rows, seed=0)] == [r["id"] for r in picked]
    assert [r["id"] for r in hop_stratified(rows, seed=1)] != [r["id"] for r in picked]
    # each group's draw does not depend on the other groups
    only_two = hop_stratified(rows, per_hop=100, hops=(2,), seed=0)
    assert [r["id"] for r in only_two] == [r["id"] for r in picked[:100]]
    with pytest.raises(ValueError, match="4-hop"):
        hop_stratified(rows[:250], per_hop=100)
    assert hop_count({"id": "x", "question_decomposition": [{}, {}, {}]}) == 3


TAG_SOUP = st.lists(st.sampled_from(
    ["<support>", "</support>", "<answer>", "</answer>", "<response_1>", "</response_1>", "<response_2>",
     "1", "4", ",", " ", "Ilse", "Marrow", "the", "999999999999999", "-", "\n", "[3]"]), max_size=40).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), TAG_SOUP), st.sampled_from(EXAMPLES), st.integers(1, 4))
def test_fuzz_any_text_scores_in_unit_cube(text, example, m):
    vector = TASK.score(text, example)
    assert vector.shape == (5,) and np.all((vector >= 0) & (vector <= 1))
    matrix = TASK.score_chain(text, example, m)
    assert matrix.shape == (m, 5) and np.all((matrix >= 0) & (matrix <= 1))
    assert np.all(TASK.scalar(matrix) <= 1)


def test_score_does_not_mutate_example():
    example = copy.deepcopy(FOUR_HOP)
    TASK.score(answer(gold(example), "x"), example)
    assert example == FOUR_HOP


# ----- which block counts, citation formats, options ---------------------------

def test_first_and_last_block_semantics():
    g = gold(TWO_HOP)
    wrong = [p["idx"] for p in TWO_HOP["paragraphs"] if p["idx"] not in g][:2]
    text = answer(g, TWO_HOP["answer"]) + "\nOn second thought:\n" + answer(wrong, "nobody")
    np.testing.assert_array_equal(TASK.score(text, TWO_HOP), np.ones(5))                 # first (default)
    np.testing.assert_array_equal(get_task("musique", block="first").score(text, TWO_HOP), np.ones(5))
    np.testing.assert_array_equal(get_task("musique", block="last").score(text, TWO_HOP), [0, 0, 1, 1, 0])
    # <support> and <answer> are picked independently, each the first (or last) of its kind
    split = f"<support>{g[0]}</support><support>{g[1]}</support><answer>x</answer><answer>{TWO_HOP['answer']}</answer>"
    np.testing.assert_array_equal(TASK.score(split, TWO_HOP), [1, 0, 1, 1, 0])
    np.testing.assert_array_equal(get_task("musique", block="last").score(split, TWO_HOP), [0, 1, 1, 1, 1])
    # a first <answer> that is empty is no answer under "first", even if a later one is filled
    empty_first = "<answer> </answer>" + answer(g, TWO_HOP["answer"])
    np.testing.assert_array_equal(TASK.score(empty_first, TWO_HOP), np.zeros(5))
    np.testing.assert_array_equal(get_task("musique", block="last").score(empty_first, TWO_HOP), np.ones(5))


def test_citation_formats():
    a, b = gold(TWO_HOP)
    final = f"<answer>{TWO_HOP['answer']}</answer>"
    comma, anyint = TASK, get_task("musique", citations="any")
    cases = {                                     # support text: (hops under "comma", under "any")
        f"{a}, {b}": ([1, 1], [1, 1]),
        f"{a},{b}": ([1, 1], [1, 1]),
        f" {a} ,\n {b} ": ([1, 1], [1, 1]),
        f"[{a}, {b}]": ([0, 0], [1, 1]),           # the release: '[2' and '5]' are no integers
        f"{a} {b}": ([0, 0], [1, 1]),
        f"{a}; {b}": ([0, 0], [1, 1]),
        f"{a}, {b}.": ([1, 0], [1, 1]),
        f"#{a}, paragraph {b}": ([0, 0], [1, 1]),
        f"{a}, ²": ([1, 0], [1, 0]),               # a Unicode digit is no index (the release's int() raises)
        "": ([0, 0], [0, 0]),
    }
    for support, (want_comma, want_any) in cases.items():
        text = f"<support>{support}</support>{final}"
        assert comma.score(text, TWO_HOP)[:2].tolist() == want_comma, support
        assert anyint.score(text, TWO_HOP)[:2].tolist() == want_any, support
        assert comma.score(text, TWO_HOP)[4] == anyint.score(text, TWO_HOP)[4] == 1.0


def test_bracketed_citations_in_a_chain_under_both_options():
    g = gold(FOUR_HOP)
    brackets = f"<support>[{', '.join(map(str, g))}]</support><answer>{FOUR_HOP['answer']}</answer>"
    text = f"<response_1>{brackets}</response_1>"
    # "comma": '[a' and 'd]' are no integers, the middle items are (as in the release)
    np.testing.assert_array_equal(TASK.score_chain(text, FOUR_HOP, 2), [[0, 1, 1, 0, 1], [0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(get_task("musique", citations="any").score_chain(text, FOUR_HOP, 2),
                                  [[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])


def test_text_helpers_for_blocks_and_citations():
    assert first_tag("<a>x</a><a>y</a>", "a") == "x" and last_tag("<a>x</a><a>y</a>", "a") == "y"
    assert first_tag("<a>x<a>y</a>", "a") == "x<a>y"       # the release's regex: a nested opening is content
    assert first_tag("<a>x", "a") is None and first_tag("</a><a>", "a") is None and first_tag(None, "a") is None
    assert first_tag("<A>x</a>", "a", ignore_case=True) == "x" and first_tag("<A>x</a>", "a") is None
    assert pick_tag("<a>1</a><a>2</a>", "a", "last") == "2"
    with pytest.raises(ValueError, match="block must be one of"):
        pick_tag("", "a", "middle")
    assert parse_comma_indices("3, 7, [12]") == [3, 7] and parse_comma_indices(None) == []
    assert parse_comma_indices("1" * 5000 + ", 4") == [4] and parse_comma_indices("007") == [7]
    assert parse_indices("[3, 7]") == [3, 7]


@pytest.mark.parametrize(("params", "match"), [
    ({"block": "middle"}, r"musique: block must be one of 'first', 'last'"),
    ({"block": None}, r"musique: block must be one of"),
    ({"citations": "brackets"}, r"musique: citations must be one of 'comma', 'any'"),
    ({"citations": 1}, r"musique: citations must be one of"),
])
def test_options_are_validated(params, match):
    with pytest.raises(ValueError, match=match):
        get_task("musique", **params)


def test_options_travel_as_json():
    params = json.loads(json.dumps({"block": "last", "citations": "any"}))
    task = get_task("musique", **params)
    assert (task.block, task.citations) == ("last", "any")
    assert repr(task) == "MusiqueTask(block='last', citations='any')"
    assert (TASK.block, TASK.citations) == ("first", "comma")


TAG_SOUP = st.lists(st.one_of(st.sampled_from(["<support>", "</support>", "<answer>", "</answer>", "<a>", "</a>",
                                               ",", " ", "[", "]", "7", "12", "\n", "²", "İ", "<"]),
                              st.text(max_size=6)), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(TAG_SOUP, st.sampled_from(["first", "last"]), st.sampled_from(["comma", "any"]), st.booleans())
def test_parsers_never_raise(text, block, citations, ignore_case):
    for tag in ("answer", "support", "a"):
        got = pick_tag(text, tag, block, ignore_case=ignore_case)
        assert got is None or (isinstance(got, str) and got == got.strip())
    assert all(isinstance(i, int) and i >= 0 for i in parse_comma_indices(text))
    vector = get_task("musique", block=block, citations=citations).score(text, FOUR_HOP)
    assert vector.shape == (5,) and np.all((vector >= 0) & (vector <= 1))


MEGABYTE = {
    "unclosed answers": "<answer>" * 125_000,
    "answer pairs": "<answer></answer>" * 58_824,
    "support commas": "<support>" + "1," * 500_000 + "</support><answer>x</answer>",
    "long digit runs": "<support>" + "9" * 1_000_000 + "</support><answer>x</answer>",
    "open prefixes": "<answe" * 166_667,
    "closes only": "</answer>" * 111_112,
}


@pytest.mark.parametrize("name", sorted(MEGABYTE))
def test_parsers_are_linear_on_a_megabyte(name):
    from timed_checks import assert_linear

    text = MEGABYTE[name]
    assert 900_000 <= len(text) <= 1_100_000
    tasks = [get_task("musique", block=block, citations=citations)
             for block in ("first", "last") for citations in ("comma", "any")]

    def parse(text):
        for task in tasks:
            task.score(text, FOUR_HOP)
        for block in ("first", "last"):
            pick_tag(text, "answer", block, ignore_case=True)
        parse_comma_indices(text)

    assert_linear(parse, text)

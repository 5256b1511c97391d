"""MuSiQue task: per-hop citation rewards, answer F1, prompts, chains, data validation."""

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpo.tasks import get_task
from vpo.tasks.musique import FIXTURE, MAX_CITATIONS, hop_count, hop_stratified

TASK = get_task("musique")
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
    # the slot limit is on indices, whatever the separators
    assert TASK.score(f"<support>[{others[0]}] [{g[0]}] and {g[1]}</support><answer>x</answer>",
                      TWO_HOP)[:2].tolist() == [1, 1]


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
    g = gold(TWO_HOP)
    text = ("Format: <support>indices</support><answer>short answer</answer>\nReasoning...\n"
            + answer(g, TWO_HOP["answer"]))
    np.testing.assert_array_equal(TASK.score(text, TWO_HOP), np.ones(5))


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

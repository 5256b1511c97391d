"""The describe task: its three readers' reward functions on hand-scored answers, its data, and
its place in the registry (the contract run over every task covers the rest)."""

import json

import numpy as np
import pytest

from vpo.tasks import get_task
from vpo.tasks.describe import SPLITS
from vpo.tasks.describe.rewards import (BRIEF_WORDS, FACTS_FOR_FULL, FLAIR_FOR_FULL, LONG_WORDS, brevity, facts,
                                        flair, normal)

LEMON = {"topic": ["lemon"], "known_facts": ["sour yellow citrus fruit juice tart"]}


def score(text, row=LEMON):
    return brevity([text], **row)[0], facts([text], **row)[0], flair([text], **row)[0]


def test_hand_scored_answers():
    # 4 words, names the topic, one fact (sour): brevity 1, facts 1/4, no flair word
    assert score("A lemon is sour.") == (1.0, 0.25, 0.0)
    # 11 words: brevity (15 - 11) / (15 - 5) = 0.4; facts: yellow, citrus, fruit (3 of 4); flair: vibrant
    assert score("A vibrant lemon is a yellow citrus fruit, small and round.") == (pytest.approx(0.4), 0.75, 1 / 3)
    # plurals and case match: "Lemons", "fruits"; four facts: full
    assert score("Lemons: sour, yellow, tart citrus fruits.")[1] == 1.0
    # no topic named: nothing but facts (a fact list about something unnamed still states facts)
    assert score("It is sour and yellow, a stunning vibrant majestic thing.") == (0.0, 0.5, 0.0)
    # the topic without any fact: brevity needs one true thing about it
    assert score("A lemon is a lemon.") == (0.0, 0.0, 0.0)
    assert score("") == (0.0, 0.0, 0.0)


def test_brevity_falls_linearly_between_its_limits():
    row = {"topic": ["lemon"], "known_facts": ["sour"]}
    for extra in range(0, LONG_WORDS + 3):
        text = "lemon sour " + " ".join(["word"] * extra)
        n = 2 + extra
        want = 1.0 if n <= BRIEF_WORDS else max(0.0, (LONG_WORDS - n) / (LONG_WORDS - BRIEF_WORDS))
        assert brevity([text], **row)[0] == pytest.approx(want)


def test_no_answer_maxes_every_objective():
    # full facts and full flair need FACTS_FOR_FULL + FLAIR_FOR_FULL + 1 words (the topic), past BRIEF_WORDS
    assert FACTS_FOR_FULL + FLAIR_FOR_FULL + 1 > BRIEF_WORDS
    best = "lemon sour yellow citrus tart vibrant zesty refreshing"
    b, f, v = score(best)
    assert f == 1.0 and v == 1.0 and b < 1.0


def test_counts_are_distinct_words():
    assert score("A lemon, sour sour sour sour.")[1] == 0.25
    assert score("A stunning stunning stunning lemon.")[2] == 1 / 3


def test_normal_forms():
    assert [normal(w) for w in ("Lemons", "berries", "glass", "bus", "citrus", "fruit")] == [
        "lemon", "berry", "glass", "bus", "citrus", "fruit"]


def test_chat_completions_and_columns_as_trl_passes_them():
    turns = [[{"role": "assistant", "content": "A lemon is sour."}]]
    assert brevity(turns, **LEMON) == [1.0]
    with pytest.raises(ValueError, match="known_facts"):
        facts(["x", "y"], topic=["a", "b"], known_facts=["one"])


def test_splits_are_disjoint_and_rows_are_trl_rows():
    rows = {split: [json.loads(line) for line in path.read_text().splitlines()] for split, path in SPLITS.items()}
    assert len(rows["train"]) == 50 and len(rows["test"]) == 16 and len(rows["extra"]) == 32
    topics = [r["topic"] for split in rows.values() for r in split]
    assert len(set(topics)) == len(topics) == 98  # no topic in two splits, none twice in one
    for row in rows["train"] + rows["test"] + rows["extra"]:
        assert row["prompt"][0]["content"].startswith("Describe ") and row["topic"] in row["prompt"][0]["content"]
        assert len(row["known_facts"].split()) >= 8


def test_the_task_scores_chains_with_the_functions():
    task = get_task("describe")
    example = task.examples("train")[0]
    assert task.objective_names(example) == ("brevity", "facts", "flair")
    text = "<response_1>A lemon is sour.</response_1><response_2>A stunning lemon is yellow and tart.</response_2>"
    matrix = task.score_chain(text, example, 3)
    assert matrix.shape == (3, 3)  # zero-padded to m
    # 7 words: brevity (15 - 7) / 10
    np.testing.assert_allclose(matrix, [[1.0, 0.25, 0.0], [0.8, 0.5, 1 / 3], [0.0, 0.0, 0.0]])
    assert [e["topic"] for e in task.examples("test")][:2] == ["apple", "coconut"]

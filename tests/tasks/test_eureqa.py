"""EUREQA task: entity exact match, normalisation, prompts, chains, raw-row conversion."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.tasks import get_task
from vpo.tasks.eureqa import FIXTURE, LETTERS, from_eureqa_row

TASK = get_task("eureqa")
EXAMPLES = TASK.examples("test")
EX = EXAMPLES[0]


def tags(**names):
    return "\n".join(f"<entity_{k}>{v}</entity_{k}>" for k, v in names.items())


def gold_text(example):
    return tags(**{k: (v if isinstance(v, str) else v[0]) for k, v in example["entities"].items()})


def test_fixture_and_objectives():
    assert FIXTURE.is_file() and len(EXAMPLES) == 4
    assert TASK.objective_names() == ("entity_A", "entity_B", "entity_C", "entity_D", "entity_E")
    for example in EXAMPLES:
        np.testing.assert_array_equal(TASK.score(gold_text(example), example), np.ones(5))


def test_per_entity_exact_match_after_normalisation():
    e = EX["entities"]
    text = tags(A=e["A"].replace("_", " ").upper(),      # underscores and case
                B="the Glass Harbour (film)",             # article, punctuation
                C="Glass_Harbour_Novel",                  # wrong
                D="",                                     # empty never matches
                E="  port   saltmere ")                   # whitespace
    np.testing.assert_array_equal(TASK.score(text, EX), [1, 1, 0, 0, 1])
    assert TASK.scalar(TASK.score(text, EX)) == pytest.approx(0.6)


def test_partial_names_do_not_count_and_aliases_do():
    river = next(x for x in EXAMPLES if isinstance(x["entities"]["E"], list))
    assert TASK.score(tags(E="Aske"), river)[4] == 1.0
    assert TASK.score(tags(E="River_Aske"), river)[4] == 1.0
    assert TASK.score(tags(A="Ingrid"), river)[0] == 0.0


def test_tags_case_insensitive_and_last_block_wins():
    # block="last" (an option; the default reads the first block, as the release)
    text = "<ENTITY_A>wrong</ENTITY_A> thinking... <Entity_A>Maren_Oakhurst</Entity_A>"
    np.testing.assert_array_equal(get_task("eureqa", block="last").score(text, EX), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(TASK.score(text, EX), [0, 0, 0, 0, 0])


def test_garbage_scores_zero():
    for text in ["", "Maren_Oakhurst", "<entity_A>Maren_Oakhurst", "<entity_F>x</entity_F>", "<entity_A></entity_A>"]:
        np.testing.assert_array_equal(TASK.score(text, EX), np.zeros(5))


def test_prompts():
    single = TASK.prompt(EX)
    assert EX["narrative"] in single and "A: Person A" in single and "<entity_E>name</entity_E>" in single
    multi = TASK.prompt(EX, 3)
    assert "<response_1>" in multi and "</response_3>" in multi and "3 genuinely different" in multi
    assert "end with exactly these five tags" not in multi
    assert multi.count("<entity_A>name</entity_A>") == 2  # example blocks for answer 1 and answer m


def test_score_chain_m3_shape_and_dedup():
    full = gold_text(EX)
    half = tags(A=EX["entities"]["A"], B="nobody")
    text = (f"<response_1>{full}</response_1><response_2>{half}</response_2>"
            f"<response_3>{full.replace('_', ' ')}</response_3>")
    matrix = TASK.score_chain(text, EX, 3)
    assert matrix.shape == (3, 5)
    np.testing.assert_array_equal(matrix, [[1] * 5, [1, 0, 0, 0, 0], [0] * 5])
    np.testing.assert_array_equal(TASK.score_chain(full, EX, 2), np.zeros((2, 5)))  # no numbered tags


def test_raw_eureqa_rows_are_converted():
    raw = {"idx": 17, "question": ["Person A wrote Book B.", "Book B is set in City C."],
           "entity_masks": ["Person A", "Book B", "City C", "Country D", "Continent E", "Planet F"],
           "entities": ["Jane_Doe", "Some_Book", "Springfield", "Freedonia", "Europe", "Earth"]}
    example = from_eureqa_row(raw, 0)
    assert example == {"id": 17, "narrative": "Person A wrote Book B.\nBook B is set in City C.",
                       "masks": raw["entity_masks"][:5],
                       "entities": dict(zip(LETTERS, raw["entities"][:5], strict=True))}
    assert TASK.validate(example, 0) == example
    with pytest.raises(ValueError, match=r"row 3: field 'entities' needs at least 5"):
        from_eureqa_row({**raw, "entities": raw["entities"][:3]}, 3)
    with pytest.raises(ValueError, match=r"row 4: missing field 'question'"):
        from_eureqa_row({k: v for k, v in raw.items() if k != "question"}, 4)


def test_examples_from_raw_jsonl(tmp_path):
    path = tmp_path / "eureqa.jsonl"
    rows = [{"idx": k, "question": f"Person A met Person B {k}.", "entity_masks": list("ABCDE"),
             "entities": [f"N{k}_{x}" for x in "ABCDE"]} for k in range(5)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    loaded = TASK.examples("train", 3, seed=1, source=str(path))
    assert len(loaded) == 3 and all(isinstance(e["entities"], dict) for e in loaded)
    assert loaded == TASK.examples("train", 3, seed=1, source=str(path))


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda r: r.pop("narrative"), "missing field 'narrative'"),
    (lambda r: r.update(narrative=["a"]), "field 'narrative' must be str"),
    (lambda r: r.update(masks=["a", "b"]), "field 'masks'"),
    (lambda r: r["entities"].pop("C"), "missing field 'entities.C'"),
    (lambda r: r["entities"].update(D=5), "field 'entities.D' must be"),
    (lambda r: r["entities"].update(B="  "), "field 'entities.B'"),
    (lambda r: r["entities"].update(E=[]), "field 'entities.E'"),
    (lambda r: r.update(entities=["x"] * 5), "field 'entities' must be dict"),
    (lambda r: r.update(id=1.5), "field 'id'"),
])
def test_malformed_examples_name_field_and_row(mutate, field):
    row = json.loads(FIXTURE.read_text())[0]
    mutate(row)
    with pytest.raises(ValueError, match="row 2") as err:
        TASK.validate(row, 2)
    assert field in str(err.value)


SOUP = st.lists(st.sampled_from(
    ["<entity_A>", "</entity_A>", "<ENTITY_B>", "</entity_b>", "<response_1>", "</response_1>", "<response_2>",
     "Maren", "_", "Oakhurst", "the", " ", "<entity_E>", "</entity_E>", "Port_Saltmere", "İ", "\n"]),
    max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), SOUP), st.sampled_from(EXAMPLES), st.integers(1, 4))
def test_fuzz_any_text_scores_in_unit_cube(text, example, m):
    vector = TASK.score(text, example)
    assert vector.shape == (5,) and set(np.unique(vector)) <= {0.0, 1.0}
    matrix = TASK.score_chain(text, example, m)
    assert matrix.shape == (m, 5) and np.all((matrix >= 0) & (matrix <= 1))


# ----- which block counts --------------------------------------------------------

def test_first_and_last_block_semantics():
    e = EX["entities"]
    draft = tags(A=e["A"], B="draft_guess", C=e["C"])
    final = tags(A="second_thought", B=e["B"], D=e["D"], E=e["E"])
    text = f"Draft:\n{draft}\nFinal:\n{final}"
    first, last = get_task("eureqa", block="first"), get_task("eureqa", block="last")
    # each letter is read on its own: the first (or last) block of that letter
    np.testing.assert_array_equal(TASK.score(text, EX), [1, 0, 1, 1, 1])
    np.testing.assert_array_equal(first.score(text, EX), [1, 0, 1, 1, 1])
    np.testing.assert_array_equal(last.score(text, EX), [0, 1, 1, 1, 1])
    # an empty first block is an empty prediction under "first" (never matches)
    np.testing.assert_array_equal(TASK.score(tags(A="") + tags(A=e["A"]), EX), np.zeros(5))
    np.testing.assert_array_equal(last.score(tags(A="") + tags(A=e["A"]), EX), [1, 0, 0, 0, 0])
    # inside a chain the block rule applies within each <response_i>
    chain = f"<response_1>{draft}{final}</response_1><response_2>{final}</response_2>"
    np.testing.assert_array_equal(TASK.score_chain(chain, EX, 2), [[1, 0, 1, 1, 1], [0, 1, 0, 1, 1]])
    np.testing.assert_array_equal(last.score_chain(chain, EX, 2), [[0, 1, 1, 1, 1], [0, 1, 0, 1, 1]])


def test_first_block_reads_like_the_release_regex():
    # first opening tag to the next closing tag, tag name in any case
    nested = "<entity_A>Maren_Oakhurst<ENTITY_A>x</entity_a>"
    assert TASK.score(nested, EX)[0] == 0.0          # content is 'Maren_Oakhurst<ENTITY_A>x'
    assert get_task("eureqa", block="last").score(nested, EX)[0] == 0.0
    assert TASK.score("<Entity_A>Maren_Oakhurst</ENTITY_A>", EX)[0] == 1.0


@pytest.mark.parametrize("block", ["all", "Last", None, 0])
def test_block_option_is_validated(block):
    with pytest.raises(ValueError, match=r"eureqa: block must be one of 'first', 'last'"):
        get_task("eureqa", block=block)


def test_block_option_travels_as_json():
    task = get_task("eureqa", **json.loads(json.dumps({"block": "last"})))
    assert task.block == "last" and repr(task) == "EureqaTask(block='last')" and TASK.block == "first"


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=400), SOUP), st.sampled_from(EXAMPLES), st.sampled_from(["first", "last"]))
def test_fuzz_block_options(text, example, block):
    vector = get_task("eureqa", block=block).score(text, example)
    assert vector.shape == (5,) and set(np.unique(vector)) <= {0.0, 1.0}


@pytest.mark.parametrize("text", ["<entity_A>" * 100_000, "<entity_A></entity_A>" * 47_620, "<ENTITY_" * 125_000,
                                  "İ</entity_e>" * 83_334])
def test_scoring_is_linear_on_a_megabyte(text):
    from timed_checks import assert_linear

    assert 900_000 <= len(text) <= 1_100_000
    tasks = [get_task("eureqa", block=block) for block in ("first", "last")]
    assert_linear(lambda t: [task.score(t, EX) for task in tasks], text)

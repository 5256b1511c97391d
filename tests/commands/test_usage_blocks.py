"""Every module's ``Usage::`` block (its docstring's first literal block) runs, so none goes stale.

Python blocks run statement by statement in a scratch folder; a statement whose comment names
an exception and a colon (``# ValueError: ...``) must raise it. What a block takes as given (a batch, an
example, a checkpoint folder) is made below, in ``GIVEN``. ``vpo ...`` command lines are parsed
by the real parser (every flag they show exists), and the cheap ones run. A block that needs a
GPU, a network, a trained policy or an engine's launcher is in ``SKIP`` with its reason; the test
named there runs the same code.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
BLOCK = re.compile(r"^Usage[^\n]*::\n\n((?:[ ]{4}.*\n|[ ]*\n)+)", re.MULTILINE)
EXPECTS = re.compile(r"#\s*(\w+(?:Error|Exception)):")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def usage_blocks() -> dict[str, str]:
    """{module: its Usage block, dedented}, read with ``ast`` (nothing imported)."""
    found = {}
    for path in sorted((SRC / "vpo").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True)
        match = BLOCK.search((doc or "") + "\n")
        if match:
            found[module_name(path)] = textwrap.dedent(match.group(1)).strip("\n") + "\n"
    return found


BLOCKS = usage_blocks()


def is_shell(block: str) -> bool:
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return all(line.startswith(("vpo ", "python ", "python3 ", "  ", "'")) for line in lines)


SKIP = {
    "vpo.integrations.trl.plan": "loads a model and trains (tests/integrations/test_trl_plan.py runs plan_training "
                                 "and its trainer on a tiny model)",
    "vpo.integrations.trl.warmup": "samples from and trains a model (tests/commands/test_warmup.py and "
                                   "tests/demo/test_demo_smollm2.py run the chain warm-up)",
    "vpo.demo.device": "takes a finished demo run's metrics (tests/demo/test_demo.py runs describe_setting)",
    "vpo.demo.plots": "takes a finished demo run's metrics (tests/demo/test_demo.py runs headline_plots)",
    "vpo.demo.results": "takes a finished demo run (tests/demo/test_demo.py runs build_metrics)",
    "vpo.evaluation": "samples pools from a policy "
                      "(tests/sampling/test_evaluation.py runs sample_pools on a tiny model)",
    "vpo.search": "samples from a policy "
                  "(tests/sampling/test_search.py runs best_of_n and the curves on tiny models)",
    "vpo.integrations.trl": "trains with TRL on a model (tests/integrations/test_trl_integration.py runs each path)",
    "vpo.integrations.trl.rewards": "trains with TRL on a model "
                                    "(tests/integrations/test_trl_integration.py runs each path)",
    "vpo.integrations.trl.trainer": "trains with TRL on a model "
                                    "(tests/integrations/test_trl_integration.py runs each path)",
    "vpo.integrations.trl.progress": "labels a TRL trainer's progress "
                                     "(tests/integrations/test_trl_integration.py, tests/commands/test_terminal.py)",
    "vpo.integrations.trl.scorers": "scores what TRL passes inside a training step "
                                    "(tests/integrations/test_trl_integration.py, "
                                    "tests/integrations/test_trl_chain_format.py)",
    "vpo.integrations.openevolve.evolve": "evolves with OpenEvolve and a policy "
                                          "(tests/integrations/test_openevolve.py)",
    "vpo.integrations.openevolve.llm": "an OpenEvolve LLM client on a policy (tests/integrations/test_openevolve.py)",
    "vpo.integrations.openevolve.problems": "searches with OpenEvolve and a policy "
                                            "(tests/integrations/test_openevolve.py)",
    "vpo.integrations.openrlhf": "an OpenRLHF launch on a GPU cluster "
                                 "(recipes/openrlhf/; tests/integrations/test_openrlhf.py)",
    "vpo.integrations.verl": "a verl launch on GPUs (recipes/verl/; tests/integrations/test_verl_integration.py)",
    "vpo.integrations.verl_rewards": "a verl launch on GPUs (tests/integrations/test_verl_own_rewards.py)",
    "vpo.sampling.vllm": "needs vLLM and a GPU (scripts/gpu_check.sh runs it on one)",
    "vpo.sandbox.driver": "the worker's bootstrap, run by vpo.sandbox.pool and never by hand",
    "vpo.estimators.common": "a fragment of an estimator's body (return ...), not a script",
}
"""Blocks that do not run here, and why."""

HEAVY_COMMANDS = ("train", "eval", "search", "demo", "rewards", "warmup", "data export")
"""Commands whose Usage lines are parsed but not run: they train, sample, need your files, or
write a thousand mazes (tests/commands/test_data_export.py runs the export)."""


def tiny_checkpoint(folder: str, *, maze_format: bool = True) -> None:
    """A random tiny Llama in the demo's compact maze format (a VPO run) at ``folder``."""
    from vpo.models import build_char_tokenizer, build_tiny_llama
    from vpo.tasks.maze.format import CompactMazeFormat

    fmt = CompactMazeFormat(max_answers=3)
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    build_tiny_llama(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    if maze_format:
        fmt.save(folder, task="maze", task_params={"size": 5, "reward_mode": "linear"}, method="vpo", seed=0)


BATCH = """
import numpy as np
rng = np.random.default_rng(0)
rewards = [rng.random((3, 4)) for _ in range(8)]        # B = 8 rollouts of (m = 3, D = 4)
group_ids = ["p1"] * 4 + ["p2"] * 4
"""

MAZE_EXAMPLE = "from vpo.tasks import get_task\nexample = get_task('maze', size=5).examples('test', 1)[0]\n"

MYPKG = '''
import sys
from pathlib import Path
Path("mypkg").mkdir()
Path("mypkg/__init__.py").write_text("")
Path("mypkg/rewards.py").write_text(
    "def accuracy(prompts, completions, **kwargs):\\n"
    "    return [float('apple' in c) for c in completions]\\n"
    "def brevity(prompts, completions, **kwargs):\\n"
    "    return [1.0 / (1 + len(c)) for c in completions]\\n")
sys.path.insert(0, str(Path.cwd()))
Path("prompts.jsonl").write_text('{"prompt": "Name a red fruit."}\\n{"prompt": "Name a colour."}\\n')
'''

GIVEN = {
    "vpo.chains": """
from vpo.chains import RewriteRule, dedup, format_chain, pad_rows, parse_answers, rewrite_prompt
MAZE_TEMPLATE = "Give {m} routes, route i inside <{tag}_i>...</{tag}_i>."
prompt = "Find a route. Answer with <answer>UP DOWN ...</answer>."
text = "<route_1>UP</route_1> <route_2>up</route_2>"
normalise = str.upper
vectors = [[1.0, 0.0, 0.5, 1.0]]
""",
    "vpo.checkpoints": "from tests_usage import tiny_checkpoint; tiny_checkpoint('runs/demo/checkpoints/vpo-s0')",
    "vpo.formats": """
from tests_usage import tiny_checkpoint
from vpo.models import load_tokenizer
from vpo.tasks import get_task
tiny_checkpoint("runs/demo/checkpoints/vpo-s0")
task = get_task("maze", size=5)
tok = load_tokenizer("runs/demo/checkpoints/vpo-s0")
examples = task.examples("test", 2)
example = examples[0]
text = "<route_1>UUL<route_2>RRD"
""",
    "vpo.workload": "from tests_usage import tiny_checkpoint; tiny_checkpoint('runs/vpo', maze_format=False)",
    "vpo.sampling": """
from tests_usage import tiny_checkpoint
tiny_checkpoint("runs/vpo", maze_format=False)
prompt_0, prompt_1 = "3 12 e", "1 08 s"
""",
    "vpo.estimators": BATCH,
    "vpo.estimators.vpo": BATCH,
    "vpo.estimators.derive": BATCH.replace("(3, 4)", "(1, 4)"),
    "vpo.estimators.baselines": BATCH.replace("(3, 4)", "(1, 4)") + "w1, w2 = [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]\n",
    "vpo.estimators.normalize": """
import numpy as np
scores, group_index = np.array([0.1, 0.5, 0.9, 0.2]), np.array([0, 0, 1, 1])
""",
    "vpo.estimators.reductions": "import numpy as np\nmatrix = np.array([[1.0, 0, 0.5, 0], [0, 1, 0, 0.5]])\n",
    "vpo.estimators.registry": BATCH.replace("(3, 4)", "(1, 4)"),
    "vpo.estimators.rules": """
import numpy as np
from vpo.estimators.rules import group_norm
scores, group_ids = np.array([0.1, 0.5, 0.9, 0.2]), ["a", "a", "b", "b"]
""",
    "vpo.goals": MAZE_EXAMPLE + "task = get_task('maze', size=5)\n",
    "vpo.export": """
from vpo.tasks import get_task
task = get_task("maze", size=9)
example = task.examples("test", 1)[0]
""",
    "vpo.metrics": """
import numpy as np
rng = np.random.default_rng(0)
scalars, vectors = rng.random(30), rng.random((30, 4))
eval_w = rng.dirichlet(np.ones(4), 16)
per_example_scores = rng.random(20)
""",
    "vpo.objective": "import numpy as np\nfrom vpo.weights import sample_simplex\n",
    "vpo.report": """
import numpy as np
from vpo.evaluation import example_weights, pool_metrics, summarize
from vpo.tasks import get_task
task = get_task("maze", size=5)
weights = example_weights(4, 4, 8, seed=0)
pools = {m: np.random.default_rng(m).integers(0, 2, size=(4, 6, 4)).astype(float) for m in (1, 3)}
metrics = {"title": "A report", "intro": "Two methods on one task.",
           "methods": {}}
for name, m in (("GRPO", 1), ("VPO", 3)):
    metrics["methods"][name] = summarize([pool_metrics(pools[m], task, eval_weights=weights)], label=name, m=m,
                                         objectives=list(task.objectives))
""",
    "vpo.reward_failures": """
def my_reward(prompts, completions, **kwargs):
    return [float(len(c) < 20) for c in completions]
prompts, completions = ["Name a fruit."] * 2, ["apple", "a rather long answer, too long"]
""",
    "vpo.reward_guard": """
from pathlib import Path
Path("my_rewards.py").write_text(
    "from trl.rewards import get_soft_overlong_punishment\\n"
    "overlong = get_soft_overlong_punishment(96, 32)\\n"
    "def accuracy(completions, solution, **kwargs):\\n"
    "    return [float(s in c) for c, s in zip(completions, solution)]\\n")
""",
    "vpo.rewards": """
def is_red(prompts, completions, **kwargs):
    return [float("apple" in c or "cherry" in c) for c in completions]
def is_short(prompts, completions, **kwargs):
    return [1.0 / (1 + len(c)) for c in completions]
prompts = ["Name a fruit."] * 2
completions = ["<response_1>apple</response_1><response_2>pear</response_2><response_3>apple</response_3>",
               "<response_1>cherry</response_1>"]
labels = ["q1", "q1"]
""",
    "vpo.runs": "from pathlib import Path\ntext = '# report'\n",
    "vpo.sandbox": """
from vpo.sandbox import Program, shutdown
src = "class Solution:\\n    def twoSum(self, nums, target):\\n        return [0, 1]\\n"
src_a, src_b = "print(int(input()) + 1)", "print(input())"
tests = [("1\\n", "2")]
""",
    "vpo.sandbox.pool": """
from vpo.sandbox import Limits
code, inputs, outputs = "print(int(input()) * 2)", ["21\\n"], ["42"]
""",
    "vpo.tasks.math": """
from pathlib import Path
Path("data").mkdir()
Path("data/math_test.jsonl").write_text('{"id": 1, "question": "1 + 1?", "answer": "2"}\\n')
""",
    "vpo.tasks.musique": """
import json
from pathlib import Path
import vpo.tasks
from vpo.tasks.musique import hop_stratified
Path("data").mkdir()
rows = [json.loads(line) for line in (Path(vpo.tasks.__file__).parent / "fixtures" / "musique.jsonl").open()]
with open("data/musique_ans_v1.0_dev.jsonl", "w") as fh:   # 100 questions of each hop count at least
    for copy in range(100):
        for row in rows:
            fh.write(json.dumps({**row, "id": f"{row['id']}-{copy}"}) + "\\n")
""",
    "vpo.tasks.io": """
import shutil
from pathlib import Path
Path("data").mkdir()
shutil.copy(Path(__import__("vpo.tasks", fromlist=["x"]).__file__).parent / "fixtures" / "musique.jsonl",
            "data/musique_ans_v1.0_dev.jsonl")
""",
    "vpo.commands.advantages": """
import json
from vpo.tasks import get_task
example = get_task("math").examples("test", 1)[0]
with open("samples.jsonl", "w") as fh:
    for text in ("<solution_1>\\\\boxed{%s}</solution_1>" % example["answer"], "no idea"):
        fh.write(json.dumps({"example": example, "completion": text}) + "\\n")
""",
    "vpo.tasks.code": """
answer_text = "n = int(input())\\nprint(sum(map(int, input().split())))"
text = "```python\\n" + answer_text + "\\n```"
""",
    "vpo.tasks.toolcall": """
import shutil
from pathlib import Path
from vpo.tasks.toolcall import BFCL_FIXTURE
Path("possible_answer").mkdir()
shutil.copy(BFCL_FIXTURE, "BFCL_v4_simple_python.json")
shutil.copy(BFCL_FIXTURE.parent / "possible_answer" / BFCL_FIXTURE.name,
            "possible_answer/BFCL_v4_simple_python.json")
""",
    "vpo.tasks.own_rewards": MYPKG + "text = '<response_1>apple</response_1><response_2>blue</response_2>'\n",
    "vpo.tasks.text": "from vpo.tasks.text import first_tag, parse_comma_indices, pick_tag\ntext = '<a>A</a>'\n",
    "vpo.tasks.maze.schema": MAZE_EXAMPLE,
    "vpo.tasks.maze.simulator": MAZE_EXAMPLE,
}
"""Setup code per module: what its block takes as given."""

NEEDS = {"vpo.tasks.math": "math_verify", "vpo.tasks.math.verify": "math_verify", "vpo.tasks.math.task": "math_verify",
         "vpo.tasks": "math_verify", "vpo.integrations.trl_config": "trl", "vpo.integrations.trl.config": "trl", "vpo.models": "transformers",
         "vpo.checkpoints": "transformers", "vpo.formats": "transformers", "vpo.workload": "transformers",
         "vpo.sampling": "transformers", "vpo.commands.advantages": "math_verify", "vpo.reward_guard": "trl"}
"""Optional dependencies a block imports (skipped where they are not installed)."""


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch working folder, this file importable as ``tests_usage`` (its ``tiny_checkpoint``),
    and no lasting registration or out-dir lock."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "tests_usage", sys.modules[__name__])
    monkeypatch.syspath_prepend(str(tmp_path))
    from vpo.estimators import list_estimators
    from vpo.estimators.registry import _REGISTRY

    list_estimators()  # the built-in estimators register on first use: before the snapshot
    before = dict(_REGISTRY)
    yield tmp_path
    for name in set(_REGISTRY) - set(before):  # the registry block registers "my_rule"
        del _REGISTRY[name]
    from vpo.runs import release_out_dir

    release_out_dir()
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def run_python(module: str, block: str) -> None:
    import types

    scratch_module = types.ModuleType(f"usage_of_{module.replace('.', '_')}")
    sys.modules[scratch_module.__name__] = scratch_module  # a dataclass defined in the block looks itself up
    try:
        _run_statements(module, block, scratch_module.__dict__)
    finally:
        del sys.modules[scratch_module.__name__]


def _run_statements(module: str, block: str, namespace: dict) -> None:
    exec(compile(GIVEN.get(module, ""), f"<given for {module}>", "exec"), namespace)
    lines = block.splitlines()
    for node in ast.parse(block).body:
        source = "\n".join(lines[node.lineno - 1:node.end_lineno])
        expected = EXPECTS.search(lines[node.end_lineno - 1])
        code = compile(ast.Module(body=[node], type_ignores=[]), f"<Usage of {module}, line {node.lineno}>", "exec")
        with contextlib.redirect_stdout(io.StringIO()):
            if expected is None:
                exec(code, namespace)
                continue
            with pytest.raises(Exception) as caught:
                exec(code, namespace)
        names = {cls.__name__ for cls in type(caught.value).__mro__}
        assert expected.group(1) in names, f"{module}: {source!r} raised {caught.value!r}, not {expected.group(1)}"


def command_lines(block: str) -> list[list[str]]:
    """The ``vpo ...`` command lines of a shell block (continuations joined), as argv lists."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = line.split("  #", 1)[0].strip()
        if line.startswith("vpo "):
            out.append(shlex.split(line)[1:])
    return out


def run_shell(module: str, block: str, capsys) -> None:
    from vpo.cli import build_parser, main

    exec(compile(GIVEN.get(module, ""), f"<given for {module}>", "exec"), {"__name__": "usage_given"})
    commands = command_lines(block)
    assert commands, f"{module}: a shell block with no vpo command"
    for argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            raise AssertionError(f"{module}: `vpo {' '.join(argv)}` does not parse: {capsys.readouterr().err}")
        if argv[0] in HEAVY_COMMANDS or " ".join(argv[:2]) in HEAVY_COMMANDS:
            continue
        assert main(argv) == 0, f"{module}: `vpo {' '.join(argv)}` failed: {capsys.readouterr().err}"


def test_usage_blocks_are_found():
    # every module with a usage line has its block read (a regex that reads none tests nothing)
    assert len(BLOCKS) >= 60
    assert "vpo.objective" in BLOCKS and "vpo.commands.advantages" in BLOCKS and "vpo.warm_pool" in BLOCKS
    assert all(is_shell(BLOCKS[m]) for m in ("vpo.commands.train", "vpo.integrations.verl"))
    assert not is_shell(BLOCKS["vpo.estimators.registry"])
    assert set(SKIP) <= set(BLOCKS), set(SKIP) - set(BLOCKS)


@pytest.mark.parametrize("module", sorted(BLOCKS))
def test_usage_block_runs(module, scratch, capsys):
    if module in SKIP:
        pytest.skip(SKIP[module])
    if module in NEEDS:
        pytest.importorskip(NEEDS[module])
    block = BLOCKS[module]
    if module == "vpo.sandbox.pool":
        from vpo.sandbox import isolation_mode

        if isolation_mode() != "bwrap":
            pytest.skip("its block names bubblewrap isolation, which this machine lacks")
    if is_shell(block):
        run_shell(module, block, capsys)
    else:
        run_python(module, block)

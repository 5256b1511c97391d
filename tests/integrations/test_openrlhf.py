"""The OpenRLHF 0.11.2 reward file's contract, and OpenRLHF's own code where it runs on CPU.

The file is loaded the way ``openrlhf/utils/agent.py`` loads it
(``spec_from_file_location("reward_func", path)``) and called with what OpenRLHF passes: lists
of length 1, ``queries`` = prompt + response decoded with special tokens, ``labels`` from the
JSONL written by ``convert`` from a real ``vpo.export`` parquet. With OpenRLHF's source
installed (``scripts/install.sh``: ``--no-deps``; the full package needs flash-attn and CUDA),
its ``SingleTurnAgentExecutor`` calls the file with chat tokenizers built offline, and its
``train_ppo_ray`` parser checks the recipe's command line.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import vpo.integrations.openrlhf as openrlhf
from vpo.estimators import get_estimator
from vpo.export import export
from vpo.integrations.verl import compute_score, group_weights
from vpo.tasks import get_task
from vpo.tasks.maze import route_via_diamond, route_via_gold, shortest_safe_route


def chat(content: str) -> str:
    """A Qwen-style templated prompt, as OpenRLHF's --data.apply_chat_template builds it."""
    return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def reward_module():
    spec = importlib.util.spec_from_file_location("reward_func", openrlhf.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # as OpenRLHF does: no package context, absolute imports only
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A real verl export (maze 5x5, m = 3) converted to OpenRLHF JSONL."""
    out = tmp_path_factory.mktemp("maze")
    paths = export("maze", out, fmt="verl", train=3, test=0, answers=3, size=5, seed=1)
    jsonl = out / "train.jsonl"
    assert openrlhf.convert(str(paths["train"]), str(jsonl), method="vpo") == 3
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    import pyarrow.parquet as pq

    return rows, pq.read_table(paths["train"]).to_pylist()


def chains(example: dict) -> list[str]:
    gold, diamond = " ".join(route_via_gold(example)), " ".join(route_via_diamond(example))
    safe = " ".join(shortest_safe_route(example))
    return [f"<route_1>{gold}</route_1>\n<route_2>{diamond}</route_2>",
            f"<route_1>{safe}</route_1>",
            f"<route_1>{gold}</route_1><route_3>{safe}</route_3>",
            "I give up."]


def test_reward_func_matches_verl_compute_score(reward_module, exported):
    rows, verl_rows = exported
    keys = None
    for row, verl_row in zip(rows, verl_rows, strict=True):
        label = json.loads(row["label"])
        assert row["prompt"] == verl_row["prompt"] and label["method"] == "vpo" and label["m"] == 3
        assert row["datasource"] == "maze"  # OpenRLHF's eval metrics are eval_<datasource>_pass<n>
        prompt = chat(row["prompt"][-1]["content"])
        for text in chains(label["example"]):
            out = reward_module.reward_func([prompt + text + "<|im_end|><|endoftext|>"], [prompt], [row["label"]])
            assert set(out) == {"rewards", "scores", "extra_logs"}
            assert isinstance(out["rewards"], float) and out["scores"] == out["rewards"]
            assert all(isinstance(v, float) for v in out["extra_logs"].values())
            keys = keys or sorted(out["extra_logs"])
            assert sorted(out["extra_logs"]) == keys
            info = verl_row["extra_info"]
            expected = compute_score(verl_row["data_source"], text, verl_row["reward_model"]["ground_truth"], info)
            assert out["rewards"] == expected["score"]
            # OpenRLHF left-truncates over-long prompts: a suffix of the prompt must work too
            cut = prompt[len(prompt) // 2:]
            again = reward_module.reward_func([cut + text + "<|im_end|>"], [prompt], [row["label"]])
            assert again["rewards"] == out["rewards"]
    assert "vpo/set_score" in keys and "vpo/objective/gold" in keys and "vpo/answers_parsed" in keys


def test_group_norm_on_our_rewards_is_vpo(reward_module, exported):
    """OpenRLHF's group_norm (Bessel std, eps 1e-9) applied to the file's rewards equals
    vpo.estimators' VPO with those normalisation knobs and the prompt's shared weights."""
    rows, _ = exported
    task = get_task("maze", size=5)
    rewards, matrices, uids = [], [], []
    for row in rows:
        label = json.loads(row["label"])
        prompt = chat(row["prompt"][-1]["content"])
        for text in chains(label["example"]):
            rewards.append(reward_module.reward_func([prompt + text], [prompt], [row["label"]])["rewards"])
            matrices.append(task.score_chain(text, label["example"], 3))
            uids.append(label["example_id"])  # the group key every engine uses
    r = torch.tensor(rewards, dtype=torch.float64).reshape(len(rows), -1)
    group_norm = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)).reshape(-1).numpy()
    weights = {i: group_weights(i, 4, num_weights=100, seed=0) for i in set(uids)}
    expected = get_estimator("vpo")(matrices, uids, weights=weights, std="sample", eps=1e-9, degenerate="none")
    np.testing.assert_allclose(rewards, expected.scores, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(group_norm, expected.advantages, rtol=1e-9, atol=1e-9)
    assert np.ptp(group_norm) > 1.0


def test_reward_func_validates_and_reports_loudly(reward_module, exported, capsys):
    rows, _ = exported
    label = json.loads(rows[0]["label"])
    prompt = chat("maze")
    bad_cases = [
        ([prompt + "UP", prompt + "UP"], [prompt, prompt], [rows[0]["label"]] * 2, "lists of length 1"),
        ([prompt + "UP"], [prompt], [json.dumps({k: v for k, v in label.items() if k != "index"})], "index"),
        ([prompt + "UP"], [prompt], ["maze"], "not valid JSON"),
        ([prompt + "UP"], [prompt], [json.dumps({**label, "task": "lake"})], "not a vpo task"),
        ([prompt + "UP"], [prompt], [json.dumps({**label, "weights": 3})], "unknown field"),
        (["something else entirely"], [prompt], [rows[0]["label"]], "does not start with the prompt"),
    ]
    for queries, prompts, labels, message in bad_cases:
        with pytest.raises(ValueError, match=message):
            reward_module.reward_func(queries, prompts, labels)
        assert "vpo reward_func failed" in capsys.readouterr().err  # visible although OpenRLHF swallows it
    # m = 1 with method vpo is allowed (VPO on single answers); grpo on an m = 3 label is not
    assert reward_module.reward_func([prompt + "UP"], [prompt], [json.dumps({**label, "m": 1})])["rewards"] == 0.0
    with pytest.raises(ValueError, match="method='grpo'"):
        reward_module.reward_func([prompt + "UP"], [prompt], [json.dumps({**label, "method": "grpo"})])


def test_convert_and_command_line(exported, tmp_path):
    _, verl_rows = exported
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(verl_rows), src)
    with pytest.raises(ValueError, match="max_at_k"):
        openrlhf.convert(str(src), str(tmp_path / "x.jsonl"), method="max_at_k")
    with pytest.raises(ValueError, match=r"single-answer.*answers=3"):
        openrlhf.convert(str(src), str(tmp_path / "x.jsonl"), method="grpo")
    broken = [dict(r, extra_info={k: v for k, v in r["extra_info"].items() if k != "index"}) for r in verl_rows]
    pq.write_table(pa.Table.from_pylist(broken), tmp_path / "broken.parquet")
    with pytest.raises(ValueError, match=r"row 0: extra_info\.index"):
        openrlhf.convert(str(tmp_path / "broken.parquet"), str(tmp_path / "y.jsonl"))
    out = subprocess.run([sys.executable, "-m", "vpo.integrations.openrlhf", "convert", str(src),
                          str(tmp_path / "g.jsonl"), "--method", "multi_rlvr", "--seed", "3"],
                         capture_output=True, text=True, check=True)
    assert "wrote 3 rows" in out.stdout
    labels = [json.loads(json.loads(line)["label"]) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert {(lab["method"], lab["seed"], lab["m"]) for lab in labels} == {("multi_rlvr", 3, 3)}
    path = subprocess.run([sys.executable, "-m", "vpo.integrations.openrlhf", "path"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert path == openrlhf.__file__ and path.endswith(".py")


# ---------------------------------------------------------------------------------------
# OpenRLHF's own code: its single-turn executor with chat tokenizers whose decode does not give
# the prompt back, and its argument parser on the recipe's command line
# ---------------------------------------------------------------------------------------
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                   "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chat_tokenizer(style: str, corpus: list[str]):
    """A byte-level BPE chat tokenizer trained offline on ``corpus``.

    ``llama3``: Llama-3's control tokens and template, ``<|end_header_id|>`` swallowing the
    whitespace after it (an added token with ``rstrip``, as several chat tokenizers have), so
    the decoded prompt lacks the template's ``\\n\\n``. ``qwen``: Qwen's ChatML tokens and
    template with Qwen2's NFC normaliser, so decomposed accents come back composed.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    if style == "qwen":
        core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel
                                                         .alphabet(), show_progress=False))
    if style == "llama3":
        core.add_special_tokens([AddedToken("<|begin_of_text|>", special=True),
                                 AddedToken("<|start_header_id|>", special=True),
                                 AddedToken("<|end_header_id|>", special=True, rstrip=True),
                                 AddedToken("<|eot_id|>", special=True)])
        tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                      pad_token="<|eot_id|>")
        tok.chat_template = LLAMA3_TEMPLATE
    else:
        core.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        tok.chat_template = QWEN_TEMPLATE
    return tok


class ScriptedEngine:
    """Stands in for OpenRLHF's vLLM engine: answers every request with fixed response tokens."""

    def __init__(self, response_ids: list[int]):
        self.response_ids = response_ids
        self.prompt_ids: list[int] | None = None

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        from types import SimpleNamespace

        self.prompt_ids = list(prompt_token_ids)
        out = SimpleNamespace(token_ids=list(self.response_ids), finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


@pytest.mark.parametrize("style", ["llama3", "qwen"])
def test_openrlhf_executor_rewards_with_chat_tokenizers(style, exported):
    """OpenRLHF 0.11.2's SingleTurnAgentExecutor loads the reward file, tokenises the templated
    prompt, decodes prompt + response with special tokens and calls reward_func. With these
    tokenizers the decoded query does not start with the prompt; the reward must still be
    compute_score's on the response, also when OpenRLHF left-truncates the prompt."""
    import asyncio
    import unicodedata
    from types import SimpleNamespace

    agent = pytest.importorskip("openrlhf.utils.agent", reason="openrlhf 0.11.2 source not installed "
                                "(scripts/install.sh installs it with --no-deps)")
    from openrlhf.datasets.prompts_dataset import preprocess_data

    rows, verl_rows = exported
    system = unicodedata.normalize("NFD", "Réponds en français, s'il te plaît.")  # decomposed accents
    dataset = [{"prompt": [{"role": "system", "content": system}, *row["prompt"]], "label": row["label"]}
               for row in rows]
    corpus = [m["content"] for d in dataset for m in d["prompt"]]
    corpus += [text for row in rows for text in chains(json.loads(row["label"])["example"])]
    tok = chat_tokenizer(style, corpus)
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=openrlhf.__file__)
    eos = tok.eos_token
    checked = 0
    for data, verl_row in zip(dataset, verl_rows, strict=True):
        prompt, label = preprocess_data(data, input_key="prompt", label_key="label",
                                        apply_chat_template=tok.apply_chat_template)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        decoded = tok.decode(prompt_ids, skip_special_tokens=False)
        assert decoded != prompt and not (decoded + "x").startswith(prompt)  # the case this test is about
        for text in chains(json.loads(label)["example"]):
            expected = compute_score(verl_row["data_source"], text, verl_row["reward_model"]["ground_truth"],
                                     verl_row["extra_info"])["score"]
            response_ids = tok(text + eos, add_special_tokens=False)["input_ids"]
            for keep in (len(prompt_ids), len(prompt_ids) // 3):  # whole prompt, then left-truncated by OpenRLHF
                engine = ScriptedEngine(response_ids)
                params = SimpleNamespace(max_tokens=len(response_ids), logprobs=None)
                out = asyncio.run(executor.execute(prompt, label, params, keep + len(response_ids), tok, engine))
                assert engine.prompt_ids == prompt_ids[-keep:]
                assert out["reward"] == expected, (style, keep, text)  # None: reward_func raised
                assert out["extra_logs"]["vpo/set_score"] == out["reward"]
                checked += 1
    assert checked == 2 * 4 * len(rows)


def openrlhf_train_args(argv: list[str]):
    """OpenRLHF 0.11.2's own ``train_ppo_ray`` parser and argument checks on ``argv``: the
    ``__main__`` block of its source, run up to the point where it would call ``train(args)``."""
    import argparse
    import ast
    import datetime
    import importlib.util
    import os

    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    if spec is None:
        pytest.skip("openrlhf 0.11.2 source not installed (scripts/install.sh installs it with --no-deps)")
    tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    main = next(node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
    captured = {}
    namespace = {"argparse": argparse, "os": os, "datetime": datetime.datetime, "__name__": "openrlhf_cli",
                 "train": lambda args: captured.setdefault("args", args)}
    old_argv = sys.argv
    sys.argv = ["train_ppo_ray", *argv]
    try:
        exec(compile(ast.Module(body=main.body, type_ignores=[]), spec.origin, "exec"), namespace)
    finally:
        sys.argv = old_argv
    return captured["args"]


def readme_command() -> list[str]:
    """The OpenRLHF arguments of the training command in recipes/openrlhf/README.md."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "recipes" / "openrlhf" / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "openrlhf.cli.train_ppo_ray" in b)
    command = block.replace("\\\n", " ").replace('"$(python -m vpo.integrations.openrlhf path)"', openrlhf.__file__)
    line = next(line for line in command.splitlines() if "openrlhf.cli.train_ppo_ray" in line)
    words = shlex.split(line)
    return words[words.index("openrlhf.cli.train_ppo_ray") + 1:]


def test_readme_command_parses_with_openrlhf_and_evaluates():
    args = openrlhf_train_args(readme_command())
    assert args.reward.remote_url == [openrlhf.__file__]
    assert args.algo.advantage.estimator == "group_norm" and args.rollout.n_samples_per_prompt == 8
    # evaluation runs when global_step % eval.steps == 0 (OpenRLHF's default -1 never evaluates)
    assert args.eval.dataset and 0 < args.eval.steps <= 7  # maze: 1000 prompts / 128 per step = 7 steps an episode
    assert args.eval.n_samples_per_prompt == 8 and args.eval.temperature == 0.7  # pass8 = best@8 of the reward
    assert args.data.label_key == "label" and args.data.apply_chat_template

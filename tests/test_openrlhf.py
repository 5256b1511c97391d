"""The OpenRLHF 0.11.2 reward file's contract, without OpenRLHF (not installable on CPU).

The file is loaded the way ``openrlhf/utils/agent.py`` loads it
(``spec_from_file_location("reward_func", path)``) and called with what OpenRLHF passes: lists
of length 1, ``queries`` = prompt + response decoded with special tokens, ``labels`` from the
JSONL written by ``convert`` from a real ``vpo.export`` parquet.
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
    assert "set_score" in keys and "best_gold" in keys


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
            uids.append(label["index"])
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

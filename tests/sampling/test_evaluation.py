"""Tests of vpo.evaluation: pool sampling shapes, metric values on hand-made pools, summaries."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vpo import metrics as M
from vpo.evaluation import (Pools, TaskFormat, example_weights, paired, per_example_from_json,
                            per_example_to_json, pool_metrics, sanitize, score_generation, summarize)
from toy_tasks import LetterTask


def test_pool_metrics_hand_made_pool():
    task = LetterTask()
    # one example, pool of 4: two "a" answers, one "b", one zero
    vectors = np.array([[[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0]]], dtype=float)
    w = np.array([[0.5, 0.5, 0.0]])
    out = pool_metrics(vectors, task, eval_weights=w)
    scal = vectors[0].mean(axis=1)
    assert out["best_at_k"].shape == (1, 4)
    assert out["best_at_k"][0, 0] == pytest.approx(scal.mean())
    assert out["best_at_k"][0, 3] == pytest.approx(scal.max())
    assert out["pref_best_at_k"][0, 3] == pytest.approx(0.5)
    assert out["pass_at_k"][0].max() == 0.0   # nothing has every component at 1
    assert out["completion_rate"][0] == pytest.approx(0.75)
    assert out["diversity"][0] == pytest.approx(M.diversity(vectors[0]))
    assert out["objective_best"][0].tolist() == [1, 1, 0]
    assert out["objective_mean"][0].tolist() == pytest.approx([0.5, 0.25, 0.0])
    # pareto: [1,0,0] x2 and [0,1,0] are non-dominated, the zero row is dominated
    assert out["pareto_fraction"][0] == pytest.approx(0.75)


def test_pass_at_k_counts_solved_answers():
    task = LetterTask()
    vectors = np.array([[[1, 1, 1], [0, 0, 0], [0, 0, 0]]], dtype=float)
    out = pool_metrics(vectors, task, eval_weights=np.full((1, 3), 1 / 3))
    assert out["pass_at_k"][0].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_example_weights_reproducible_and_per_example():
    w1 = example_weights(3, 4, 16, seed=7)
    w2 = example_weights(3, 4, 16, seed=7)
    assert w1.shape == (3, 16, 4)
    np.testing.assert_array_equal(w1, w2)
    assert not np.allclose(w1[0], w1[1])
    np.testing.assert_allclose(w1.sum(axis=-1), 1.0)


def test_score_generation_scores_each_answer_without_dedup():
    task = LetterTask()
    fmt = TaskFormat(task)
    rows = score_generation(task, fmt, "<ans_1>a</ans_1><ans_2>a</ans_2>", {"id": 1}, 3)
    assert rows.tolist() == [[1, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert score_generation(task, fmt, "bc", {"id": 1}, 1).tolist() == [[0, 1, 1]]


def test_summarize_and_paired():
    task = LetterTask()
    rng = np.random.default_rng(0)
    w = example_weights(6, 3, 8, seed=0)
    good = [pool_metrics((rng.random((6, 4, 3)) > 0.3).astype(float), task, eval_weights=w) for _ in range(3)]
    bad = [pool_metrics((rng.random((6, 4, 3)) > 0.9).astype(float), task, eval_weights=w) for _ in range(3)]
    entry = summarize(good, label="good", m=1, objectives=task.objectives, seeds=[0, 1, 2])
    assert entry["num_seeds"] == 3 and entry["num_examples"] == 6
    assert len(entry["best_at_k"]["mean"]) == 4
    lo, hi = entry["diversity"]["ci_seeds"]
    assert lo <= entry["diversity"]["mean"] <= hi
    assert set(entry["objective_mean"]) == {"a", "b", "c"}
    diff = paired(good, bad, "best_at_k", k=4)
    assert diff["mean"] > 0 and diff["n"] == 6
    single = summarize(good[:1], label="one", m=1, objectives=task.objectives)
    assert single["diversity"]["ci_seeds"] == [None, None]
    json.dumps(sanitize(entry), allow_nan=False)


def test_per_example_json_roundtrip_and_sanitize():
    d = {"x": np.arange(6.0).reshape(2, 3)}
    back = per_example_from_json(json.loads(json.dumps(per_example_to_json(d))))
    np.testing.assert_array_equal(back["x"], d["x"])
    assert sanitize({"a": float("nan"), "b": np.float32(1.5), "c": [np.int64(2)]}) == {"a": None, "b": 1.5, "c": [2]}


def test_pools_save_load(tmp_path):
    pools = Pools(vectors=np.ones((2, 6, 3)), m=3, texts=[["x", "y"], ["z", ""]], completion_tokens=4.5,
                  truncated=0.25)
    pools.save(tmp_path / "p.npz")
    back = Pools.load(tmp_path / "p.npz")
    assert back.m == 3 and back.texts == pools.texts and back.completion_tokens == 4.5
    np.testing.assert_array_equal(back.vectors, pools.vectors)


def test_sample_pools_with_a_tiny_model():
    pytest.importorskip("transformers")
    from vpo.evaluation import sample_pools
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    task = LetterTask()
    tok = build_char_tokenizer("abc<>_/ANSWERgiv0123456789 ", extra_tokens=["<ans_1>", "</ans_1>"])
    model = build_tiny_qwen2(tok, seed=0)
    examples = [{"id": i} for i in range(3)]
    pools = sample_pools(model, tok, task, examples, m=3, pool=6, max_new_tokens=8, batch_size=4, progress=False)
    assert pools.vectors.shape == (3, 6, 3)
    assert len(pools.texts) == 3 and all(len(t) == 2 for t in pools.texts)
    assert 0 <= pools.completion_tokens <= 8 and 0 <= pools.truncated <= 1
    assert np.all((pools.vectors == 0) | (pools.vectors == 1))
    again = sample_pools(model, tok, task, examples, m=3, pool=6, max_new_tokens=8, batch_size=4, progress=False)
    assert again.texts == pools.texts  # seeded
    with pytest.raises(ValueError):
        sample_pools(model, tok, task, examples, m=4, pool=6, progress=False)
    assert not math.isnan(pools.completion_tokens)


def test_sample_pools_rejects_ragged_objectives_before_sampling():
    from vpo.evaluation import sample_pools
    from vpo.tasks import get_task

    code = get_task("code")
    examples = code.examples(source=None)
    assert len({code.num_objectives(e) for e in examples}) > 1  # the fixtures differ in test count
    with pytest.raises(ValueError, match="--search best-of-n"):
        sample_pools(None, None, code, examples, m=1, pool=2, progress=False)

"""One group key for every engine: the exported ``example_id``. For the same row, seed and step,
TRL (``VPOReward``, ``VPOTrainer``), verl (``compute_score``) and OpenRLHF (``reward_func``) draw
the same weights and give the same set scores; random weighting and goal conditioning share one
w per row."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from vpo.estimators import advantages_from_scores, get_spec
from vpo.export import example_key, trl_row, verl_row
from vpo.goals import attach_goal, goal_of
from vpo.integrations import openrlhf
from vpo.integrations.verl import compute_score
from vpo.tasks import get_task
from vpo.tasks.maze import route_via_diamond, route_via_gold, shortest_safe_route

SEED, STEP = 3, 6


def _rows(m: int, goals: bool = False):
    """Two maze rows in both layouts, four rollouts each (chains of m answers)."""
    task = get_task("maze", size=5)
    out = []
    for i, example in enumerate(task.examples("train", 2, seed=1)):
        if goals:
            example = attach_goal(task, example, key=example_key(example, "train", i), seed=SEED)
        routes = [" ".join(r(example)) for r in (route_via_gold, route_via_diamond, shortest_safe_route)]
        texts = ([f"<route_1>{routes[0]}</route_1><route_2>{routes[1]}</route_2>", f"<route_1>{routes[2]}</route_1>",
                  f"<route_1>{routes[1]}</route_1><route_2>{routes[2]}</route_2>", "nothing"] if m > 1
                 else [routes[0], routes[1], routes[2], "UP"])
        trl = trl_row(task, example, index=i, split="train", answers=m, task_params={"size": 5})
        verl = verl_row(task, example, index=i, split="train", answers=m, task_params={"size": 5})
        out += [(trl, verl, text) for text in texts]
    return task, out


def _trl_trainer(task, method: str, m: int, step: int):
    """VPOTrainer's own compute_advantages, on a stand-in for the trainer's state."""
    from vpo.integrations.trl import VPOTrainer

    spec = get_spec(method)
    fake = SimpleNamespace(vpo_spec=spec, vpo_options={"seed": SEED}, vpo_task=task, vpo_estimator_name=method,
                           vpo_estimator=spec.fn, state=SimpleNamespace(global_step=step), vpo_answers=m)
    return lambda *args, **kwargs: VPOTrainer.compute_advantages(fake, *args, **kwargs)


def test_trl_verl_and_openrlhf_give_one_row_the_same_weights_and_set_scores():
    pytest.importorskip("trl")
    from vpo.integrations.trl import VPOReward

    task, rows = _rows(3)
    prompts = [trl["prompt"] for trl, _, _ in rows]
    texts = [text for _, _, text in rows]
    ids = [trl["example_id"] for trl, _, _ in rows]
    assert ids == [verl["extra_info"]["example_id"] for _, verl, _ in rows] and len(set(ids)) == 2

    reward = VPOReward(task, answers=3, seed=SEED)
    trl = reward(prompts, texts, example=[r["example"] for r, _, _ in rows], example_id=ids,
                 trainer_state=SimpleNamespace(global_step=STEP))
    verl = [compute_score("maze", text, v["reward_model"]["ground_truth"], {**v["extra_info"], "global_steps": STEP},
                          seed=SEED)["score"] for _, v, text in rows]
    np.testing.assert_allclose(trl, verl, rtol=0, atol=1e-12)
    assert np.ptp(verl) > 0.1

    # VPOTrainer's advantages are VPO's rule on those same scores
    matrices = [task.score_chain(text, json.loads(r["example"]), 3) for r, _, text in rows]
    advantages, _ = _trl_trainer(task, "vpo", 3, STEP)(matrices, ids, 4)
    np.testing.assert_allclose(advantages, advantages_from_scores(get_spec("vpo"), verl, ids), atol=1e-9)

    # OpenRLHF has no step: its fixed weights equal verl's for a row without global_steps
    fixed = [compute_score("maze", text, v["reward_model"]["ground_truth"], v["extra_info"], seed=SEED)["score"]
             for _, v, text in rows]
    labels = [openrlhf.make_label("maze", json.loads(v["reward_model"]["ground_truth"]), m=3, index=v["extra_info"][
        "index"], task_params={"size": 5}, seed=SEED, example_id=v["extra_info"]["example_id"]) for _, v, _ in rows]
    orlhf = [openrlhf.reward_func(["q " + text], ["q "], [label])["rewards"] for label, text in zip(labels, texts)]
    np.testing.assert_allclose(orlhf, fixed, rtol=0, atol=1e-12)

    # data without the example_id column falls back to the prompt text: other weights
    by_prompt = reward(prompts, texts, example=[r["example"] for r, _, _ in rows],
                       trainer_state=SimpleNamespace(global_step=STEP))
    assert not np.allclose(by_prompt, trl)


def test_random_weighting_and_goal_conditioning_share_one_w_per_row():
    pytest.importorskip("trl")
    task, plain = _rows(1)
    _, stated = _rows(1, goals=True)
    ids = [trl["example_id"] for trl, _, _ in plain]
    for trl, verl, text in stated:
        goal = goal_of(json.loads(trl["example"]))
        example = json.loads(verl["reward_model"]["ground_truth"])
        vector = task.score_chain(text, example, 1)[0]
        random = compute_score("maze", text, json.dumps({k: v for k, v in example.items() if k != "goal_weights"}),
                               verl["extra_info"], method="random_weight", seed=SEED)["score"]
        conditioned = compute_score("maze", text, verl["reward_model"]["ground_truth"], verl["extra_info"],
                                    method="goal_conditioned", seed=SEED)["score"]
        assert random == pytest.approx(float(vector @ goal), abs=1e-6) == conditioned  # goals are rounded to 1e-6
    matrices = [task.score_chain(text, json.loads(trl["example"]), 1) for trl, _, text in plain]
    goals = [goal_of(json.loads(trl["example"])) for trl, _, _ in stated]
    random, _ = _trl_trainer(task, "random_weight", 1, STEP)(matrices, ids, 4)
    conditioned, _ = _trl_trainer(task, "goal_conditioned", 1, STEP)(matrices, ids, 4, goals=goals)
    np.testing.assert_allclose(random, conditioned, atol=1e-4)
    assert np.ptp(random) > 0.5


def test_the_dotted_path_vpo_reward_reads_the_runs_seed_and_the_rows_weight_options():
    pytest.importorskip("trl")
    from vpo.integrations.trl import VPOReward, vpo_reward

    task, rows = _rows(3)
    columns = {key: [r[key] for r, _, _ in rows] for key in ("task", "task_params", "answers", "example", "example_id")}
    prompts, texts = [r["prompt"] for r, _, _ in rows], [text for _, _, text in rows]
    state = SimpleNamespace(global_step=STEP)

    class Run:  # TRL passes its trainer's bound _log_metric; the trainer holds the run's --seed
        args = SimpleNamespace(seed=9)

        def _log_metric(self, name, value):
            pass

    by_run = vpo_reward(prompts, texts, **columns, trainer_state=state, log_metric=Run()._log_metric)
    expected = VPOReward(task, answers=3, seed=9)(prompts, texts, example=columns["example"],
                                                  example_id=columns["example_id"], trainer_state=state)
    np.testing.assert_allclose(by_run, expected, atol=1e-12)
    assert not np.allclose(by_run, vpo_reward(prompts, texts, **columns, trainer_state=state))  # seed 0
    n = len(rows)
    by_row = vpo_reward(prompts, texts, **columns, num_weights=[10] * n, alpha=[0.5] * n, seed=[4] * n,
                        trainer_state=state, log_metric=Run()._log_metric)
    expected = VPOReward(task, answers=3, seed=4, num_weights=10, alpha=0.5)(
        prompts, texts, example=columns["example"], example_id=columns["example_id"], trainer_state=state)
    np.testing.assert_allclose(by_row, expected, atol=1e-12)


@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_a_blank_example_id_falls_back_as_none_does_in_every_engine(blank, tmp_path):
    # before: "" was a key like any other, one group (one set of weights) for every such row
    pytest.importorskip("trl")
    from vpo.commands.train import build_train_rows
    from vpo.integrations.trl import VPOReward
    from vpo.integrations.trl.scorers import group_keys as trl_group_keys
    from vpo.integrations.verl import row_key
    from vpo.rewards import rollout_group_keys
    from vpo.weights import given_key

    assert given_key(blank) is None and given_key(None) is None and given_key("a") == "a" and given_key(0) == 0
    task, rows = _rows(3)

    def verl_scores(example_id):
        return [compute_score("maze", text, v["reward_model"]["ground_truth"],
                              {**v["extra_info"], "example_id": example_id}, seed=SEED)["score"] for _, v, text in rows]

    # verl: keyed on the row's index, as with None (the two rows differ in index, so in weights)
    assert row_key({"example_id": blank, "index": 4}) == 4
    assert verl_scores(blank) == verl_scores(None) != verl_scores("one key for all")
    with pytest.raises(ValueError, match="extra_info.example_id"):
        compute_score("maze", rows[0][2], rows[0][1]["reward_model"]["ground_truth"],
                      {"example_id": blank, "answers": 3}, seed=SEED)

    # OpenRLHF: a blank id is not written into the label, and one in a label is read as absent
    def orlhf(example_id):
        out = []
        for _, v, text in rows:
            label = json.loads(openrlhf.make_label("maze", json.loads(v["reward_model"]["ground_truth"]), m=3,
                                                   index=v["extra_info"]["index"], task_params={"size": 5}, seed=SEED))
            label["example_id"] = example_id
            out.append(openrlhf.reward_func(["q " + text], ["q "], [json.dumps(label)])["rewards"])
        return out

    assert "example_id" not in json.loads(openrlhf.make_label("maze", {"id": "x"}, m=3, index=0, example_id=blank))
    assert orlhf(blank) == orlhf(None) != orlhf("one key for all")

    # TRL: keyed on the prompt, as without the column
    prompts = [trl["prompt"] for trl, _, _ in rows]
    assert rollout_group_keys(prompts, {"example_id": [blank] * len(rows)}) == rollout_group_keys(prompts, None)
    assert trl_group_keys(prompts, [blank, "x"] * (len(rows) // 2))[::2] == rollout_group_keys(prompts, None)[::2]
    reward = VPOReward(task, answers=3, seed=SEED)
    state = SimpleNamespace(global_step=STEP)
    texts, examples = [text for _, _, text in rows], [r["example"] for r, _, _ in rows]
    np.testing.assert_array_equal(reward(prompts, texts, example=examples, example_id=[blank] * len(rows),
                                         trainer_state=state),
                                  reward(prompts, texts, example=examples, trainer_state=state))

    # vpo train's rows: a blank id gets the example's own key, as a missing one does
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({**trl, "example_id": blank}) + "\n" for trl, _, _ in rows[::4]))
    built = build_train_rows(task, 3, data=str(data))
    assert [row["example_id"] for row in built] == [trl["example_id"] for trl, _, _ in rows[::4]]

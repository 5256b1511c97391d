"""verl 0.9.1 integration on CPU, with real verl objects: the ``verl.plugins`` entry point
(fresh process and Ray worker), verl's own ``compute_advantage`` against ``vpo.estimators``,
verl's ``naive`` reward manager with our ``compute_score``, input checks, and the recipes'
Hydra overrides against verl's config.

Run: ``.venv/bin/python -m pytest tests/integrations/test_verl_integration.py`` (about 30-40 s on 2 cores:
importing verl 5-6 s, a fresh process 6-7 s, a Ray worker about 15 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import string
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

verl = pytest.importorskip("verl", reason="verl is not installed (pip install -e .[verl])")
torch = pytest.importorskip("torch")

from omegaconf import OmegaConf  # noqa: E402  (after the importorskip)
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY  # noqa: E402

with warnings.catch_warnings():  # verl lists its optional engines (torchtitan, megatron, ...) as missing
    warnings.simplefilter("ignore", UserWarning)
    from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from vpo.estimators import get_estimator, get_spec  # noqa: E402
from vpo.integrations.verl import VERL_ESTIMATORS, compute_score, group_weights  # noqa: E402
from vpo.objective import set_scores  # noqa: E402
from vpo.tasks import get_task  # noqa: E402
from vpo.tasks.maze import route_via_diamond, route_via_gold, shortest_safe_route, simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = ROOT / "recipes" / "verl" / "run.sh"
MAZE_PARAMS = {"size": 5}
K, SEED = 100, 0


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def recipe_overrides(task: str, method: str, **env: str) -> list[str]:
    out = subprocess.run(["bash", str(RUN_SH), task, method],
                         env={**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def compose_verl(overrides: list[str]):
    """verl's own ppo_trainer config with ``overrides`` (what main_ppo's Hydra would build)."""
    from hydra import compose, initialize_config_dir

    config_dir = Path(importlib.util.find_spec("verl").origin).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def vpo_config():
    """The composed config of ``run.sh maze vpo``: its algorithm and reward sections are real."""
    return compose_verl(recipe_overrides("maze", "vpo"))


def maze_row(example: dict, index: int, m: int) -> tuple[str, dict]:
    extra = {"index": index, "split": "train", "task": "maze", "answers": m,
             "task_params": json.dumps(MAZE_PARAMS), "example_id": f"train-{index}"}
    return json.dumps(example), extra


def routes(example: dict) -> dict[str, str]:
    return {"gold": " ".join(route_via_gold(example)), "diamond": " ".join(route_via_diamond(example)),
            "safe": " ".join(shortest_safe_route(example)), "wall": "UP UP LEFT LEFT"}


@pytest.fixture(scope="module")
def maze_rollouts():
    """3 prompts x G = 4 hand-made rollouts, for m = 3 and m = 1, rows shuffled across groups."""
    task = get_task("maze", **MAZE_PARAMS)
    examples = task.examples("train", 3, seed=0)
    multi, single = [], []
    for index, ex in enumerate(examples):
        r = routes(ex)
        chains = [f"<route_1>{r['gold']}</route_1>\n<route_2>{r['diamond']}</route_2>\n<route_3>{r['wall']}</route_3>",
                  f"<route_1>{r['diamond']}</route_1>",
                  f"{r['safe']}\n---\n{r['gold']}",  # no numbered tag: the maze's '---' fallback
                  "I cannot solve this."]
        if index == 2:  # a group whose rollouts all score the same: std 0, advantages 0
            chains = [f"<route_1>{r['gold']}</route_1>"] * 4
        multi += [(index, ex, text) for text in chains]
        single += [(index, ex, text) for text in (r["gold"], r["diamond"], r["safe"], r["wall"])]
    order = np.random.default_rng(1).permutation(len(multi))
    return task, [multi[i] for i in order], [single[i] for i in order]


def as_dataproto(scores: list[float], uids: list[str], length: int = 12) -> DataProto:
    """verl's layout: the score at the last valid response token, ragged response lengths."""
    bs = len(scores)
    lengths = torch.tensor([3 + (5 * i) % (length - 3) for i in range(bs)])
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.float32)
    rewards = torch.zeros(bs, length)
    rewards[torch.arange(bs), lengths - 1] = torch.tensor(scores, dtype=torch.float32)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})


def verl_advantages(data: DataProto, estimator: str, config) -> np.ndarray:
    """Per-rollout advantage from verl's compute_advantage; checks it fills exactly the mask."""
    out = compute_advantage(data, adv_estimator=estimator, num_repeat=4, config=config,
                            norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True))
    adv, mask = out.batch["advantages"], out.batch["response_mask"]
    per_rollout = adv[:, 0]
    torch.testing.assert_close(adv, per_rollout[:, None] * mask)  # one value per rollout, 0 past EOS
    return per_rollout.double().numpy()


# ---------------------------------------------------------------------------------------
# plugin registration
# ---------------------------------------------------------------------------------------
FRESH_PROCESS = r"""
import importlib, importlib.util, json, sys
assert not any(name == "vpo" or name.startswith("vpo.") for name in sys.modules)
import verl  # loads the verl.plugins entry points
from importlib.metadata import entry_points
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as REG
loaded_by_verl = "vpo.integrations.verl_plugin" in sys.modules
import vpo.integrations.verl as V
import vpo.integrations.verl_plugin as P
names = sorted(V.VERL_ESTIMATORS)
same = {n: REG.get(n) is V.VERL_ESTIMATORS[n] for n in names}
before = dict(REG)
importlib.reload(P)  # a reload must not raise
spec = importlib.util.spec_from_file_location("custom_module_copy", V.__file__)  # a second module name
copy = importlib.util.module_from_spec(spec); spec.loader.exec_module(copy)
P.VERL_ESTIMATORS = copy.VERL_ESTIMATORS
added = P.register()  # different function objects under taken names: left alone
print(json.dumps({"entry_points": sorted(ep.value for ep in entry_points(group="verl.plugins")),
                  "loaded_by_verl": loaded_by_verl, "same": same, "added_again": added,
                  "unchanged": all(REG[n] is before[n] for n in before), "grpo_kept": REG["grpo"].__module__}))
"""


def test_plugin_registers_on_import_verl_in_a_fresh_process():
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", FRESH_PROCESS], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert "vpo.integrations.verl_plugin" in info["entry_points"]
    assert info["loaded_by_verl"], "import verl did not load the vpo plugin (entry point missing or failing)"
    # the built-ins (a test module may have registered more estimators in this process only)
    assert info["same"] == {name: True for name in VERL_ESTIMATORS if get_spec(name).fn.__module__.startswith("vpo.")}
    assert info["added_again"] == [] and info["unchanged"]
    assert info["grpo_kept"] == "verl.trainer.ppo.core_algos"


def test_plugin_registered_in_this_process():
    for name, fn in VERL_ESTIMATORS.items():
        assert name == name.lower()
        assert ADV_ESTIMATOR_REGISTRY.get(name) is fn, f"{name} not registered by the verl.plugins entry point"


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"VERL_LOGGING_LEVEL": "WARN", "TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    ray.shutdown()


@pytest.mark.filterwarnings("ignore:Ray state API:DeprecationWarning")
def test_registered_and_used_inside_a_ray_worker(ray_session, maze_rollouts, vpo_config):
    """A Ray worker imports verl itself; the plugin must register there and compute_advantage
    in the worker must give the advantages vpo.estimators gives here."""
    ray = ray_session
    task, multi, _ = maze_rollouts
    scores = [compute_score("maze", text, *maze_row(ex, i, 3), **dict(vpo_config.reward.custom_reward_function
                                                                     .reward_kwargs))["score"]
              for i, ex, text in multi]
    uids = [f"uid-{i}" for i, _, _ in multi]
    algorithm = OmegaConf.to_container(vpo_config.algorithm, resolve=True)

    def in_worker(scores, uids, algorithm):
        import sys

        verl_was_imported = "verl" in sys.modules
        import torch as t
        from omegaconf import OmegaConf as OC
        from verl import DataProto as DP
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as reg
        from verl.trainer.ppo.ray_trainer import compute_advantage as ca

        rewards = t.zeros(len(scores), 4)
        rewards[:, -1] = t.tensor(scores)
        data = DP.from_dict(tensors={"token_level_rewards": rewards, "response_mask": t.ones(len(scores), 4)},
                            non_tensors={"uid": __import__("numpy").array(uids, dtype=object)})
        adv = ca(data, adv_estimator="vpo", config=OC.create(algorithm)).batch["advantages"][:, 0]
        return {"verl_was_imported": verl_was_imported,
                "registered": sorted(n for n in reg if reg[n].__module__ == "vpo.integrations.verl"),
                "plugin_module": reg["vpo"].__module__, "advantages": adv.tolist()}

    result = ray.get(ray.remote(in_worker).remote(scores, uids, algorithm), timeout=180)
    # every built-in (a test module may have registered more estimators in this process only)
    assert result["registered"] == sorted(n for n in VERL_ESTIMATORS if get_spec(n).fn.__module__.startswith("vpo."))
    assert result["plugin_module"] == "vpo.integrations.verl"
    matrices = [task.score_chain(text, ex, 3) for _, ex, text in multi]
    weights = {f"uid-{i}": group_weights(f"train-{i}", 4, num_weights=K, seed=SEED) for i in range(3)}
    expected = get_estimator("vpo")(matrices, uids, weights=weights).advantages
    np.testing.assert_allclose(result["advantages"], expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# verl's compute_advantage == vpo.estimators on the same rollouts
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,verl_names", [
    ("vpo", ["vpo"]),
    ("multi_rlvr", ["multi_rlvr", "grpo"]),
    ("grpo", ["grpo"]),
    ("max_at_k", ["max_at_k"]),
    ("maxrl", ["maxrl"]),
])
def test_compute_advantage_matches_vpo_estimators(method, verl_names, maze_rollouts, vpo_config):
    task, multi, single = maze_rollouts
    m = 3 if method in ("vpo", "multi_rlvr") else 1
    rollouts = multi if m == 3 else single
    uids = [f"uid-{i}" for i, _, _ in rollouts]
    scores = [compute_score("maze", text, *maze_row(ex, i, m), method=method, m=m, num_weights=K, seed=SEED)["score"]
              for i, ex, text in rollouts]
    matrices = [task.score_chain(text, ex, m) for _, ex, text in rollouts]
    if method == "vpo":
        weights = {f"uid-{i}": group_weights(f"train-{i}", 4, num_weights=K, seed=SEED) for i in range(3)}
        result = get_estimator("vpo")(matrices, uids, weights=weights)
    else:
        result = get_estimator(method)(matrices, uids, scalar=task.scalar)
    if method == "max_at_k":  # its result.scores are the Max@K weights; the reward is the fixed scalar
        np.testing.assert_allclose(scores, [task.scalar(mat)[0] for mat in matrices], rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(scores, result.scores, rtol=1e-12, atol=1e-12)
    assert np.ptp(result.advantages) > 0.5  # the rollouts differ: a real test, not all zeros
    for name in verl_names:
        got = verl_advantages(as_dataproto(scores, uids), name, vpo_config.algorithm)
        np.testing.assert_allclose(got, result.advantages, rtol=1e-5, atol=1e-5, err_msg=name)


def test_vpo_zero_std_group_and_unit_group_std(maze_rollouts, vpo_config):
    """VPO's normalisation through verl: a group whose scores are equal gets 0, the others have
    mean 0 and population std 1. (The default v1 trainer hands every non-grpo estimator to this
    same compute_advantage; its module needs transfer_queue, not installed on CPU.)"""
    _, multi, _ = maze_rollouts
    uids = [f"uid-{i}" for i, _, _ in multi]
    scores = [compute_score("maze", text, *maze_row(ex, i, 3))["score"] for i, ex, text in multi]
    adv = verl_advantages(as_dataproto(scores, uids), "vpo", vpo_config.algorithm)
    same = np.array([u == "uid-2" for u in uids])
    assert np.all(adv[same] == 0.0) and np.abs(adv[~same]).max() > 0.5
    for uid in ("uid-0", "uid-1"):
        group = adv[np.array(uids) == uid]
        assert abs(group.mean()) < 1e-6 and abs(group.std() - 1.0) < 1e-4


def test_estimator_options_and_misconfiguration(maze_rollouts):
    _, _, single = maze_rollouts
    uids = [f"uid-{i}" for i, _, _ in single]
    scores = [compute_score("maze", text, *maze_row(ex, i, 1), method="max_at_k")["score"] for i, ex, text in single]
    data = as_dataproto(scores, uids)
    k2 = verl_advantages(data, "max_at_k", OmegaConf.create({"vpo_options": {"k": 2}}))
    k3 = verl_advantages(as_dataproto(scores, uids), "max_at_k", OmegaConf.create({"vpo_options": {"k": 3}}))
    expected = get_estimator("max_at_k")([np.array([[s]]) for s in scores], uids, k=3).advantages
    np.testing.assert_allclose(k3, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(k2, k3)
    with pytest.raises(ValueError, match="norm_adv_by_std_in_grpo"):
        compute_advantage(as_dataproto(scores, uids), adv_estimator="vpo",
                          config=OmegaConf.create({"norm_adv_by_std_in_grpo": False}))
    with pytest.raises(ValueError, match="vpo_options.*num_weights"):
        compute_advantage(as_dataproto(scores, uids), adv_estimator="vpo",
                          config=OmegaConf.create({"vpo_options": {"num_weights": 10}}))


# ---------------------------------------------------------------------------------------
# verl's naive reward manager calls our compute_score
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def naive_manager(vpo_config):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from vpo.models import build_char_tokenizer

    fn = get_custom_reward_fn(vpo_config)  # pkg://vpo.integrations.verl + the recipe's reward_kwargs
    tokenizer = build_char_tokenizer(string.printable)
    return get_reward_manager_cls("naive")(OmegaConf.create({}), tokenizer, fn), tokenizer


def run_naive(manager_and_tokenizer, data_source: str, text: str, ground_truth: str, extra_info: dict) -> dict:
    manager, tok = manager_and_tokenizer
    prompt = tok("prompt", add_special_tokens=False)["input_ids"]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    width = len(ids) + 5
    responses = torch.full((1, width), tok.pad_token_id)
    responses[0, :len(ids)] = torch.tensor(ids)
    attention = torch.zeros(1, len(prompt) + width, dtype=torch.long)
    attention[0, :len(prompt) + len(ids)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt]), "responses": responses, "attention_mask": attention},
        non_tensors={"data_source": np.array([data_source], dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": ground_truth}], dtype=object),
                     "extra_info": np.array([dict(extra_info)], dtype=object)})
    return manager.loop.run_until_complete(manager.run_single(data))


def test_naive_reward_manager_maze_set_scores(naive_manager):
    task = get_task("maze", **MAZE_PARAMS)
    ex = task.examples("train", 1, seed=7)[0]
    r = routes(ex)
    vec = {name: simulate(ex, route.split()).vector for name, route in r.items()}
    assert vec["wall"].sum() == 0 and vec["gold"][0] == vec["diamond"][0] == 1.0
    cases = [  # (text, the answers' reward vectors by hand)
        (f"<route_1>{r['gold']}</route_1><route_2>{r['diamond']}</route_2><route_3>{r['wall']}</route_3>",
         [vec["gold"], vec["diamond"]]),
        (f"<route_2>{r['safe']}</route_2>", [vec["safe"]]),
        (f"<route_1>{r['gold']}</route_1><route_2>{r['gold']}</route_2>", [vec["gold"]]),
        ("no route here", []),
    ]
    weights = group_weights("train-5", 4, num_weights=K, seed=SEED)  # keyed on the row's example_id
    keys = None
    for text, rows in cases:
        out = run_naive(naive_manager, "maze", text, *maze_row(ex, 5, 3))
        expected = float(set_scores([np.array(rows).reshape(-1, 4)], weights)[0])
        assert out["reward_score"] == pytest.approx(expected, abs=1e-12)
        info = out["reward_extra_info"]
        assert info["set_score"] == info["score"] == out["reward_score"]
        assert all(isinstance(v, int | float | str) for v in info.values())
        keys = keys or sorted(info)
        assert sorted(info) == keys  # verl reads the extra keys off the first sample
    assert expected == 0.0 and "best_diamond" in keys


def test_naive_reward_manager_toolcall_set_scores(naive_manager):
    task = get_task("toolcall")
    ex = task.examples("test")[0]  # gold: get_weather(city="Oslo", unit="celsius")
    assert ex["gold_calls"] == [{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}]

    def call(params: dict) -> str:
        return ("<think>check the weather</think>\n<tool_call>\n"
                + json.dumps({"name": "get_weather", "parameters": params}) + "\n</tool_call>")

    perfect, partial = call({"city": "Oslo", "unit": "celsius"}), call({"city": "Oslo"})
    wrong_city = call({"city": "Bergen", "unit": "celsius"})
    no_call = "<think>no tool needed</think>\n<response>It is sunny.</response>"
    by_hand = {"perfect": [1, 1, 1, 1], "partial": [1, 1, 2 / 3, 0.5], "wrong_city": [1, 1, 1, 0.5],
               "no_call": [0, 0, 0, 0]}
    cases = [
        (f"<response_1>{perfect}</response_1><response_2>{no_call}</response_2><response_3>{partial}</response_3>",
         ["perfect", "no_call", "partial"]),
        (f"<response_1>{partial}</response_1><response_2>{wrong_city}</response_2>", ["partial", "wrong_city"]),
        (f"<response_1>{no_call}</response_1>", ["no_call"]),
    ]
    extra = {"index": 0, "split": "test", "task": "toolcall", "answers": 3, "task_params": "{}"}
    weights = group_weights(0, 4, num_weights=K, seed=SEED)
    scores = []
    for text, names in cases:
        out = run_naive(naive_manager, "toolcall", text, json.dumps(ex), extra)
        expected = float(set_scores([np.array([by_hand[n] for n in names], dtype=float)], weights)[0])
        assert out["reward_score"] == pytest.approx(expected, abs=1e-9)
        scores.append(out["reward_score"])
    assert scores[0] == pytest.approx(1.0) and 0.5 < scores[1] < 1.0 and scores[2] == 0.0


def test_naive_reward_manager_fails_loudly_on_a_misconfigured_row(naive_manager):
    task = get_task("maze", **MAZE_PARAMS)
    ex = task.examples("train", 1, seed=7)[0]
    truth, extra = maze_row(ex, 5, 3)
    with pytest.raises(ValueError, match=r"extra_info\.example_id"):
        unkeyed = {k: v for k, v in extra.items() if k not in ("index", "example_id")}
        run_naive(naive_manager, "maze", "UP", truth, unkeyed)
    with pytest.raises(ValueError, match=r"reward_kwargs\.m=3.*extra_info\.answers=1"):
        run_naive(naive_manager, "maze", "UP", truth, {**extra, "answers": 1})


# ---------------------------------------------------------------------------------------
# compute_score input checks (no verl needed, but kept with the rest of the contract)
# ---------------------------------------------------------------------------------------
def test_compute_score_rejects_misconfigured_runs():
    task = get_task("maze", **MAZE_PARAMS)
    ex = task.examples("train", 1, seed=3)[0]
    truth, extra = maze_row(ex, 0, 3)
    ok = compute_score("maze", "<route_1>UP</route_1>", truth, extra)
    assert set(ok) >= {"score", "set_score", "fixed_scalar", "fixed_scalar_sum", "nonzero_answers", "acc"}
    bad = [
        (dict(data_source="mazes", extra_info={**extra, "task": "mazes"}), "data_source 'mazes' is not a vpo task"),
        (dict(extra_info={**extra, "answers": 2}, m=3), r"reward_kwargs\.m=3"),
        (dict(extra_info={k: v for k, v in extra.items() if k not in ("index", "example_id")}),
         r"extra_info\.example_id"),
        (dict(extra_info={k: v for k, v in extra.items() if k != "answers"}), r"extra_info\.answers"),
        (dict(method="grpo"), r"method='grpo'.*m=3"),
        (dict(method="ppo"), r"reward_kwargs\.method='ppo'"),
        (dict(num_weight=10), "unknown reward_kwargs option.*num_weight"),
        (dict(num_weights=0), r"reward_kwargs\.num_weights"),
        (dict(sampler="qmc"), r"reward_kwargs\.sampler"),
        (dict(ground_truth="{not json"), r"reward_model\.ground_truth is not valid JSON"),
        (dict(extra_info={**extra, "task": "musique"}), r"extra_info\.task='musique'"),
        (dict(extra_info={**extra, "task_params": json.dumps({"size": "big"})}), "task_params"),
    ]
    for change, message in bad:
        kwargs = {"data_source": "maze", "solution_str": "UP", "ground_truth": truth, "extra_info": extra, **change}
        with pytest.raises(ValueError, match=message):
            compute_score(**kwargs)


@pytest.mark.parametrize("name", ["maze", "musique", "eureqa", "toolcall", "code"])
def test_compute_score_serves_every_task_with_fixed_keys(name):
    """Each task's shipped examples: garbage scores 0 and every rollout returns the same keys
    (verl reads the extra keys off the first sample), also when D varies per example (code)."""
    task = get_task(name, **(MAZE_PARAMS if name == "maze" else {}))
    examples = task.examples("test", 2, **({"seed": 0} if name == "maze" else {}))
    params = json.dumps(MAZE_PARAMS if name == "maze" else {})
    keys = set()
    for index, ex in enumerate(examples):
        extra = {"index": index, "split": "test", "task": name, "answers": 3, "task_params": params}
        for text in ("", "<response_1>nothing</response_1>", "no idea at all"):
            out = compute_score(name, text, json.dumps(ex), extra)
            assert out["score"] == 0.0 and out["set_score"] == 0.0
            assert all(isinstance(v, int | float | str) for v in out.values())
            keys.add(tuple(sorted(out)))
    assert len(keys) == 1


def test_random_weight_shares_one_w_per_prompt():
    # one w per prompt (dataset row), shared by all its rollouts, fixed for the run
    task = get_task("maze", **MAZE_PARAMS)
    ex = task.examples("train", 1, seed=3)[0]
    r = routes(ex)
    truth, extra = maze_row(ex, 4, 1)
    a = compute_score("maze", r["gold"], truth, extra, method="random_weight")["score"]
    assert a == compute_score("maze", r["gold"], truth, extra, method="random_weight")["score"]
    b = compute_score("maze", r["gold"] + " ", truth, extra, method="random_weight")["score"]
    assert a == b  # another rollout text of the same prompt: the same w
    vector = simulate(ex, route_via_gold(ex)).vector
    w = group_weights("train-4", 4, num_weights=1)[0]
    assert a == pytest.approx(float(vector @ w)) and 0.0 <= a <= vector.max() + 1e-12
    other = compute_score("maze", r["gold"], *maze_row(ex, 5, 1), method="random_weight")["score"]
    assert other == pytest.approx(float(vector @ group_weights("train-5", 4, num_weights=1)[0])) and other != a


def test_reward_kwargs_task_params_override_the_exported_ones():
    task = get_task("maze", **MAZE_PARAMS)
    ex = task.examples("train", 1, seed=3)[0]
    truth, extra = maze_row(ex, 0, 1)
    chatty = routes(ex)["gold"] + " done"  # a non-move token: ignored unless strict_moves
    lenient = compute_score("maze", chatty, truth, extra, method="grpo")["score"]
    strict = compute_score("maze", chatty, truth, extra, method="grpo", task_params={"strict_moves": True})["score"]
    assert lenient > 0 and lenient == pytest.approx(float(np.mean(simulate(ex, route_via_gold(ex)).vector)))
    assert strict == 0.0


# ---------------------------------------------------------------------------------------
# recipes: every launcher's overrides compose against verl's own config
# ---------------------------------------------------------------------------------------
EPOCHS = {"maze": 2, "musique": 1, "eureqa": 6, "toolcall": 20, "code": 1}


def test_recipe_overrides_compose(vpo_config):
    """Every task x method launcher emits the same override keys; ``vpo_config`` composed them
    against verl's config (a wrong key fails composition), so here the values are checked."""
    keys = None
    for task in sorted(EPOCHS):
        assert os.access(ROOT / "recipes" / "verl" / f"{task}.sh", os.X_OK)
        for method, estimator, m in (("grpo", "grpo", 1), ("vpo", "vpo", 3), ("multi_rlvr", "multi_rlvr", 3),
                                     ("max_at_k", "max_at_k", 1), ("maxrl", "maxrl", 1),
                                     ("random_weight", "random_weight", 1)):
            lines = recipe_overrides(task, method)
            values = dict(line.split("=", 1) for line in lines)
            keys = keys or sorted(values)
            assert sorted(values) == keys and len(values) == len(lines)
            assert values["algorithm.adv_estimator"] == estimator and estimator in ADV_ESTIMATOR_REGISTRY
            prefix = "+reward.custom_reward_function.reward_kwargs."
            assert (values[prefix + "method"], values[prefix + "m"], values[prefix + "num_weights"]) == (
                method, str(m), "100")
            assert values["trainer.total_epochs"] == str(EPOCHS[task])
            assert values["data.train_files"] == f"data/verl/{task}-m{m}/train.parquet"
    cfg = vpo_config  # run.sh maze vpo, composed by Hydra with verl's ppo_trainer config
    assert cfg.algorithm.adv_estimator == "vpo" and cfg.trainer.total_epochs == 2
    assert dict(cfg.reward.custom_reward_function.reward_kwargs) == {
        "method": "vpo", "m": 3, "num_weights": 100, "alpha": 1.0, "sampler": "iid", "seed": 0}
    assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.data.train_batch_size == 128
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 64
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.actor_rollout_ref.actor.optim.weight_decay == 0.01
    assert cfg.actor_rollout_ref.actor.clip_ratio == 0.2 and cfg.actor_rollout_ref.actor.entropy_coeff == 0
    assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.kl_loss_coef == 0.001
    assert cfg.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"
    assert cfg.data.apply_chat_template_kwargs.enable_thinking is False


def test_recipe_env_overrides_and_bad_arguments():
    cfg = compose_verl(recipe_overrides("maze", "vpo", M="4", ROLLOUT_N="16", NUM_WEIGHTS="64")
                       + ["+algorithm.vpo_options.eps=1e-8"])
    assert cfg.reward.custom_reward_function.reward_kwargs.m == 4
    assert cfg.reward.custom_reward_function.reward_kwargs.num_weights == 64
    assert cfg.actor_rollout_ref.rollout.n == 16 and cfg.algorithm.vpo_options.eps == 1e-8
    assert cfg.data.max_response_length == 2048  # multi-answer: twice the single-answer budget
    for args in (["lake", "vpo"], ["maze", "ppo"], ["maze"]):
        out = subprocess.run(["bash", str(RUN_SH), *args], env={**os.environ, "DRY_RUN": "1"}, capture_output=True,
                             text=True)
        assert out.returncode == 2, args


# ---------------------------------------------------------------------------------------
# GDPO: the core estimator with response lengths == verl's own gdpo
# ---------------------------------------------------------------------------------------
def test_gdpo_through_verls_compute_advantage_on_compute_scores_objectives(maze_rollouts):
    """verl's trainer step for GDPO: compute_score's per-objective ``best_<name>`` fields as
    ``gdpo_reward_keys``, the response lengths from verl's batch; equal to the core estimator
    given the same lengths (token-weighted whitening)."""
    task, multi, _ = maze_rollouts
    names = task.objective_names(multi[0][1])
    infos = [compute_score("maze", text, *maze_row(ex, i, 3)) for i, ex, text in multi]
    uids = [f"uid-{i}" for i, _, _ in multi]
    data = as_dataproto([info["score"] for info in infos], uids)
    mask = data.batch["response_mask"]
    lengths = mask.sum(-1).long()
    prompt_len = 4
    data.batch["prompts"] = torch.zeros(len(uids), prompt_len, dtype=torch.long)
    data.batch["attention_mask"] = torch.cat([torch.ones(len(uids), prompt_len), mask], dim=1).long()
    for name in names:
        data.non_tensor_batch[f"best_{name}"] = np.array([info[f"best_{name}"] for info in infos], dtype=object)
    config = OmegaConf.create({"gdpo_reward_keys": [f"best_{n}" for n in names], "norm_adv_by_std_in_grpo": True})
    out = compute_advantage(data, adv_estimator="gdpo", num_repeat=4, config=config)
    got = out.batch["advantages"][:, 0].double().numpy()
    matrices = [task.score_chain(text, ex, 3) for _, ex, text in multi]
    ours = get_estimator("gdpo")(matrices, uids, response_lengths=lengths.numpy())
    np.testing.assert_allclose(got, ours.advantages, rtol=1e-4, atol=1e-4)
    assert np.ptp(ours.advantages) > 0.5
    per_rollout = get_estimator("gdpo")(matrices, uids)  # what an engine without lengths (TRL) computes
    assert not np.allclose(per_rollout.advantages, ours.advantages, atol=1e-3)



def test_gdpo_matches_verls_own_gdpo_on_ragged_responses():
    from verl.trainer.ppo.core_algos import compute_gdpo_outcome_advantage

    rng = np.random.default_rng(0)
    bs, length, dims = 12, 16, 3
    vectors = rng.integers(0, 3, size=(bs, dims)) / 2.0
    uids = np.array([f"g{i // 4}" for i in range(bs)], dtype=object)
    lengths = rng.integers(2, length + 1, size=bs)
    lengths[3] = length  # one rollout fills the whole window
    prompt_len = 5
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.float32)
    attention = np.concatenate([np.ones((bs, prompt_len), np.float32), mask], axis=1)
    keys = [f"obj{d}" for d in range(dims)]
    config = OmegaConf.create({"gdpo_reward_keys": keys, "gdpo_reward_weights": [1.0, 0.5, 2.0]})
    adv, _ = compute_gdpo_outcome_advantage(
        token_level_rewards=torch.zeros(bs, length), response_mask=torch.tensor(mask), index=uids, config=config,
        non_tensor_batch={k: vectors[:, d] for d, k in enumerate(keys)},
        batch={"prompts": torch.zeros(bs, prompt_len), "attention_mask": torch.tensor(attention, dtype=torch.long)})
    ours = get_estimator("gdpo")([v.reshape(1, -1) for v in vectors], list(uids), objective_weights=[1.0, 0.5, 2.0],
                                 response_lengths=lengths)
    got = adv.numpy()
    np.testing.assert_allclose(got, ours.advantages[:, None] * mask, rtol=1e-4, atol=1e-5)
    assert np.ptp(ours.advantages) > 0.5
    per_rollout = get_estimator("gdpo")([v.reshape(1, -1) for v in vectors], list(uids),
                                        objective_weights=[1.0, 0.5, 2.0])
    assert not np.allclose(per_rollout.advantages, ours.advantages, atol=1e-3)  # TRL's per-rollout form differs


# ---------------------------------------------------------------------------------------
# recipes: attention, memory and validation settings pass verl's own checks
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A random 2-layer Qwen3 with a char tokenizer, saved as a Hugging Face folder."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from vpo.models import build_char_tokenizer

    path = tmp_path_factory.mktemp("tiny-qwen3")
    tok = build_char_tokenizer(string.printable)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, architectures=["Qwen3ForCausalLM"])
    Qwen3ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def validate_with_verl(cfg) -> None:
    """verl's main_ppo check of a composed config (what runs before Ray starts)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Disabled critic as algorithm.adv_estimator != gae"
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_recipe_attention_override_reaches_verls_model_config(tiny_model_dir):
    """Without flash_attn the recipe passes sdpa, and verl's own HFModelConfig (what its FSDP
    workers load the actor and reference with) builds the Hugging Face config with it; verl's
    default would be flash_attention_2."""
    from verl.utils.config import omega_conf_to_dataclass

    assert importlib.util.find_spec("flash_attn") is None  # this machine: run.sh's auto must choose sdpa
    cfg = compose_verl(recipe_overrides("eureqa", "vpo", MODEL=str(tiny_model_dir)))
    validate_with_verl(cfg)
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    assert type(model).__name__ == "HFModelConfig" and model.hf_config._attn_implementation == "sdpa"
    default = compose_verl([f"actor_rollout_ref.model.path={tiny_model_dir}"])
    assert "attn_implementation" not in default.actor_rollout_ref.model.override_config
    forced = compose_verl(recipe_overrides("eureqa", "vpo", ATTN_IMPLEMENTATION="flash_attention_2"))
    assert forced.actor_rollout_ref.model.override_config.attn_implementation == "flash_attention_2"
    bad = subprocess.run(["bash", str(RUN_SH), "maze", "vpo"], env={**os.environ, "DRY_RUN": "1",
                         "ATTN_IMPLEMENTATION": "flash"}, capture_output=True, text=True)
    assert bad.returncode == 2 and "ATTN_IMPLEMENTATION='flash'" in bad.stderr


def test_sdpa_with_verls_packed_inputs_matches_unpacked(tiny_model_dir):
    """The recipe keeps use_remove_padding=True with sdpa: verl's FSDP engine then feeds one
    packed row, attention_mask=None, position ids restarting per sequence, use_cache=False;
    transformers turns the restarts into a block-diagonal mask, so each sequence sees only itself."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()
    assert model.config._attn_implementation == "sdpa"
    a, b = torch.randint(4, 90, (5,), generator=torch.Generator().manual_seed(1)), torch.randint(
        4, 90, (7,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        alone = [model(input_ids=x[None], use_cache=False).logits[0] for x in (a, b)]
        packed = model(input_ids=torch.cat([a, b])[None], attention_mask=None, use_cache=False,
                       position_ids=torch.cat([torch.arange(5), torch.arange(7)])[None]).logits[0]
        leaky = model(input_ids=torch.cat([a, b])[None], use_cache=False).logits[0]  # no restart: b sees a
    torch.testing.assert_close(packed, torch.cat(alone), rtol=1e-5, atol=1e-5)
    assert (leaky[5:] - alone[1]).abs().max() > 1e-2


@pytest.mark.parametrize("n_gpus,offload", [("4", True), ("8", False)])
def test_recipe_memory_settings_for_7_8b_pass_verl_validation(n_gpus, offload):
    for task in ("eureqa", "code"):
        cfg = compose_verl(recipe_overrides(task, "vpo", N_GPUS=n_gpus))
        validate_with_verl(cfg)
        fsdp = cfg.actor_rollout_ref.actor.fsdp_config
        assert (fsdp.param_offload, fsdp.optimizer_offload) == (offload, offload)
        assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is offload
        assert cfg.actor_rollout_ref.rollout.gpu_memory_utilization == 0.6
        assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 2 and cfg.trainer.n_gpus_per_node == int(
            n_gpus)
    small = compose_verl(recipe_overrides("maze", "vpo", N_GPUS=n_gpus))  # Qwen3-4B: no offload
    assert small.actor_rollout_ref.actor.fsdp_config.param_offload is False


def test_validation_reports_best_at_n_through_verls_metrics(vpo_config, maze_rollouts):
    """The recipe samples VAL_N = 8 answers per validation prompt at temperature 0.7; verl's
    process_validation_metrics turns our reward extra info into mean@8 and best@8 per data
    source. With one sample per prompt (verl's default val n) there is no best@k at all."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    val = vpo_config.actor_rollout_ref.rollout.val_kwargs
    assert (val.n, val.do_sample, val.temperature) == (8, True, 0.7)
    validate_with_verl(vpo_config)
    _, multi, _ = maze_rollouts
    kwargs = dict(vpo_config.reward.custom_reward_function.reward_kwargs)
    rows = [(i, compute_score("maze", text, *maze_row(ex, i, 3), **kwargs)) for i, ex, text in multi * 2]  # 8 each
    infos = {"reward": [r["score"] for _, r in rows]}
    for key in rows[0][1]:
        infos[key] = [r[key] for _, r in rows]
    uids = [f"uid-{i}" for i, _ in rows]
    metrics = process_validation_metrics(["maze"] * len(rows), uids, infos)["maze"]
    by_uid = {u: [r["set_score"] for (i, r) in rows if f"uid-{i}" == u] for u in set(uids)}
    assert {len(v) for v in by_uid.values()} == {8}
    assert metrics["set_score"]["mean@8"] == pytest.approx(np.mean([np.mean(v) for v in by_uid.values()]))
    best = metrics["set_score"]["best@8/mean"]
    assert np.mean([np.mean(v) for v in by_uid.values()]) < best <= np.mean([max(v) for v in by_uid.values()]) + 1e-12
    assert "best@8/mean" in metrics["acc"] and "best@8/mean" in metrics["best_gold"]
    assert "objective_best" not in metrics  # strings are skipped, not an error
    single = process_validation_metrics(["maze"] * 3, ["u0", "u1", "u2"], {k: v[:3] for k, v in infos.items()})
    assert not any("best@" in name for name in single["maze"]["set_score"])


def test_per_step_reward_metrics_from_verls_reward_manager(naive_manager):
    """What verl's naive manager returns as reward_extra_info, as the trainer's TransferQueue
    holds it (keys {uid}_{session}_{index}, padding rows tagged), becomes the vpo/ step metrics."""
    from vpo.integrations.verl_main import reward_rows
    from vpo.integrations.verl_recipe import reward_step_metrics

    task = get_task("maze", **MAZE_PARAMS)
    examples = task.examples("train", 2, seed=7)
    keys, tags, extra, by_hand = [], [], [], []
    for index, ex in enumerate(examples):
        r = routes(ex)
        texts = [f"<route_1>{r['gold']}</route_1><route_2>{r['diamond']}</route_2><route_3>{r['wall']}</route_3>",
                 f"<route_1>{r['safe']}</route_1><route_2>{r['safe']}</route_2>", "no route"]
        for session, text in enumerate(texts):
            out = run_naive(naive_manager, "maze", text, *maze_row(ex, index, 3))
            keys.append(f"uid{index}_{session}_0")
            tags.append({"is_padding": False})
            extra.append({"reward_extra_info": out["reward_extra_info"], "turns": 1})
            by_hand.append(out["reward_extra_info"])
    keys.append("uid0_0_0")  # a padding copy verl adds to balance the batch: not counted
    tags.append({"is_padding": True})
    extra.append(extra[0])
    infos, groups = reward_rows(keys, tags, extra)
    assert groups == ["uid0"] * 3 + ["uid1"] * 3 and infos == by_hand
    metrics = reward_step_metrics(infos, groups)
    # in tags per chain, by hand: three, two, and none (the untagged text is scored, not counted)
    assert metrics["vpo/answers_parsed"] == pytest.approx((3 + 2 + 0) / 3)
    # the repeated safe route, among 3 + 2 + 1 scored answers per prompt
    assert metrics["vpo/duplicate_rate"] == pytest.approx(2 / 12)
    assert metrics["vpo/set_score"] == pytest.approx(np.mean([i["set_score"] for i in by_hand]))
    for name in task.objective_names(examples[0]):  # completion, gold, diamond, avoid_lava
        assert metrics[f"vpo/objective/{name}"] == pytest.approx(np.mean([i[f"best_{name}"] for i in by_hand]))
    stds = [np.std([i["score"] for i in by_hand[g * 3:(g + 1) * 3]]) for g in range(2)]
    assert metrics["vpo/group_std"] == pytest.approx(np.mean(stds)) and min(stds) > 0.1


def test_verl_main_runs_verls_task_runner_with_reward_metrics():
    """The recipe's entry: verl's TaskRunnerV1 (as a Ray actor class) whose run installs the
    metrics, and verl's Hydra config; the trainer swap itself needs transfer_queue (GPU installs)."""
    import vpo.integrations.verl_main as entry
    from verl.trainer.main_ppo import TaskRunnerV1

    runner_cls = entry.VPOTaskRunner.__ray_actor_class__
    assert issubclass(runner_cls, TaskRunnerV1.__ray_actor_class__) and runner_cls.run is not TaskRunnerV1.run
    assert Path(entry.VERL_CONFIG_DIR, "ppo_trainer.yaml").is_file()
    assert "vpo.integrations.verl_main" in recipe_run_line()
    if importlib.util.find_spec("transfer_queue") is None:
        return
    from verl.trainer.ppo.v1 import trainer_base

    before = trainer_base.TRAINER_REGISTRY["sync"]
    try:
        cls = entry.install_reward_metrics("sync")
        assert issubclass(cls, before) and trainer_base.get_trainer_cls("sync") is cls
        assert entry.install_reward_metrics("sync") is cls
    finally:
        trainer_base.TRAINER_REGISTRY["sync"] = before


def recipe_run_line() -> str:
    return next(line for line in RUN_SH.read_text().splitlines() if line.startswith("ENTRY="))


@pytest.mark.slow
def test_verl_main_composes_verls_config_and_refuses_the_legacy_trainer(tmp_path):
    """``python -m vpo.integrations.verl_main`` takes verl's command line: Hydra composes the
    recipe's overrides on verl's ppo_trainer config (``--cfg job`` prints it without running)."""
    overrides = recipe_overrides("maze", "vpo")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    run = dict(capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)  # Hydra writes outputs/ in cwd
    out = subprocess.run([sys.executable, "-m", "vpo.integrations.verl_main", "--cfg", "job", *overrides], **run)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "attn_implementation: sdpa" in out.stdout and "adv_estimator: vpo" in out.stdout
    legacy = subprocess.run([sys.executable, "-m", "vpo.integrations.verl_main", *overrides, "trainer.use_v1=false"],
                            **run)
    assert legacy.returncode != 0 and "trainer.use_v1=false" in legacy.stderr

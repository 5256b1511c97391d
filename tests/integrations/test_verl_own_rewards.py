"""A verl user's own ``compute_score`` (a dict with ``score`` and named extras) as VPO's objectives,
through config overrides alone (``vpo.integrations.verl_rewards``), checked with verl's own code:
its Hydra config, its ``get_custom_reward_fn`` loader, its ``naive`` reward manager, its
``get_dataset_class`` / ``RLHFDataset`` and its ``compute_advantage``. Also the task-based route:
rows exported with ``--reward-funcs`` scored by verl's and OpenRLHF's reward functions."""

from __future__ import annotations

import importlib.util
import json
import string

import numpy as np
import pytest

verl = pytest.importorskip("verl", reason="verl is not installed (pip install -e .[verl])")
torch = pytest.importorskip("torch")

from omegaconf import OmegaConf  # noqa: E402
from test_verl_integration import as_dataproto, compose_verl, run_naive, verl_advantages  # noqa: E402

from vpo.estimators import get_estimator  # noqa: E402
from vpo.integrations.verl import group_weights  # noqa: E402
from vpo.objective import set_scores  # noqa: E402

K, SEED = 100, 0

USER_REWARD = '''
import json, pathlib

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """A GRPO user's reward: accuracy and brevity as named extras, their sum as the score."""
    with open(pathlib.Path(__file__).with_suffix(".calls"), "a") as log:  # what it was called with
        log.write(json.dumps(solution_str) + "\\n")
    accuracy = float(ground_truth.lower() in solution_str.lower())
    brevity = 1.0 / max(1, len(solution_str.split()))
    return {"score": accuracy + brevity, "accuracy": accuracy, "brevity": brevity, "source": data_source}
'''


def hand_vector(answer: str, truth: str) -> list[float]:
    return [float(truth in answer.lower()), 1.0 / max(1, len(answer.split()))]


def hand_matrix(answers: list[str], truth: str, m: int = 3) -> np.ndarray:
    """Distinct answers' vectors (first kept), zero rows up to m: by hand."""
    rows: list[list[float]] = []
    for answer in answers:
        vector = hand_vector(answer, truth)
        if answer.strip() and vector not in rows:
            rows.append(vector)
    return np.array(rows + [[0.0, 0.0]] * (m - len(rows)))


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "my_reward.py"
    path.write_text(USER_REWARD)
    return path


def overrides(user_file, keys: str = "[accuracy,brevity]") -> list[str]:
    return ["algorithm.adv_estimator=vpo",
            "reward.custom_reward_function.path=pkg://vpo.integrations.verl_rewards",
            "reward.custom_reward_function.name=compute_score",
            f"+reward.custom_reward_function.reward_kwargs.score_path={user_file}",
            "+reward.custom_reward_function.reward_kwargs.score_name=compute_score",
            f"+reward.custom_reward_function.reward_kwargs.reward_keys={keys}",
            "data.custom_cls.path=pkg://vpo.integrations.verl_rewards",
            "data.custom_cls.name=MultiAnswerDataset",
            "+data.answers=3"]


@pytest.fixture(scope="module")
def config(user_file):
    return compose_verl(overrides(user_file))


@pytest.fixture(scope="module")
def manager(config):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from vpo.models import build_char_tokenizer

    fn = get_custom_reward_fn(config)  # verl's loader: path, name and reward_kwargs from the config
    tokenizer = build_char_tokenizer(string.printable)
    return get_reward_manager_cls("naive")(OmegaConf.create({}), tokenizer, fn), tokenizer


CHAINS = {  # prompt index -> (ground truth, the four rollouts' chains)
    0: ("apple", ["<response_1>An apple</response_1><response_2>apple</response_2><response_3>A red cherry</response_3>",
                  "<response_1>apple</response_1><response_2>apple</response_2>",
                  "I would say apple",  # no tags: no answer
                  "<response_1>Cherry</response_1><response_2>A big red apple</response_2>"]),
    1: ("blue", ["<response_1>blue</response_1>",
                 "<response_1>The sky is blue</response_1><response_2>grey</response_2><response_3>BLUE</response_3>",
                 "<response_2>blue</response_2>",
                 "<response_1>green</response_1><response_2>grey</response_2><response_3>white</response_3>"]),
}


def split(chain: str) -> list[str]:
    from vpo.chains import parse_answers

    return parse_answers(chain, 3, tag="response")


def test_user_compute_score_through_verls_loader_manager_and_compute_advantage(manager, config, user_file):
    scores, uids, matrices = [], [], []
    for index, (truth, chains) in CHAINS.items():
        for chain in chains:
            out = run_naive(manager, "my_data", chain, truth, {"index": index, "answers": 3})
            matrix = hand_matrix(split(chain), truth)
            expected = float(set_scores([matrix], group_weights(index, 2, num_weights=K, seed=SEED))[0])
            assert out["reward_score"] == pytest.approx(expected, abs=1e-12)
            info = out["reward_extra_info"]
            assert info["best_accuracy"] == matrix[:, 0].max() and info["best_brevity"] == matrix[:, 1].max()
            assert info["answers_parsed"] == sum(bool(a.strip()) for a in split(chain))
            scores.append(out["reward_score"])
            uids.append(f"uid-{index}")
            matrices.append(matrix)
    calls = [json.loads(line) for line in user_file.with_suffix(".calls").read_text().splitlines()]
    # called once per non-blank answer of every chain, with the answer alone
    assert sorted(calls) == sorted(a for _, chains in CHAINS.values() for c in chains for a in split(c) if a)
    weights = {f"uid-{i}": group_weights(i, 2, num_weights=K, seed=SEED) for i in CHAINS}
    result = get_estimator("vpo")(matrices, uids, weights=weights)
    np.testing.assert_allclose(scores, result.scores, rtol=1e-12, atol=1e-12)
    assert np.ptp(result.advantages) > 0.5
    got = verl_advantages(as_dataproto(scores, uids), "vpo", config.algorithm)
    np.testing.assert_allclose(got, result.advantages, rtol=1e-5, atol=1e-5)


def test_reward_keys_read_like_gdpo_reward_keys(user_file):
    from vpo.integrations.verl_rewards import compute_score

    kwargs = {"score_path": str(user_file), "score_name": "compute_score"}
    chain = "<response_1>An apple</response_1><response_2>pear</response_2>"
    from vpo.rewards import RewardScaleWarning

    with pytest.warns(RewardScaleWarning, match="'score'"):  # the score alone (D = 1) is 1.5: outside [0, 1]
        default = compute_score("d", chain, "apple", {"index": 0, "answers": 3}, **kwargs)
    assert json.loads(default["objective_best"]) == [pytest.approx(1.5)] and "best_score" in default
    keyed = compute_score("d", chain, "apple", {"index": 5, "example_id": "q-apple", "answers": 3},
                          reward_keys=["accuracy", "brevity"], **kwargs)  # keyed on example_id, as every engine
    expected = set_scores([hand_matrix(split(chain), "apple")], group_weights("q-apple", 2, num_weights=K, seed=SEED))
    assert keyed["score"] == pytest.approx(float(expected[0]), abs=1e-12)
    with pytest.raises(ValueError, match=r"reward key\(s\) \['speed'\] not in .*accuracy"):
        compute_score("d", chain, "apple", {"index": 0, "answers": 3}, reward_keys=["accuracy", "speed"], **kwargs)
    with pytest.raises(ValueError, match="extra_info.answers"):
        compute_score("d", chain, "apple", {"index": 0}, **kwargs)
    with pytest.raises(ValueError, match="score_path"):
        compute_score("d", chain, "apple", {"index": 0, "answers": 3})
    with pytest.raises(ValueError, match="minmax"):
        compute_score("d", chain, "apple", {"index": 0, "answers": 3}, scaling="minmax", **kwargs)


def test_multi_answer_dataset_through_verls_dataset_loader(config, tmp_path):
    """verl's get_dataset_class loads MultiAnswerDataset from the config; a user's own rows (no
    extra_info.answers, no index) come out asking for 3 answers, with m and the index recorded."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from verl.utils.dataset.rl_dataset import get_dataset_class

    from vpo.models import build_char_tokenizer

    rows = [{"data_source": "my_data", "ability": "qa",
             "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Name a {thing}."}],
             "reward_model": {"style": "rule", "ground_truth": truth}, "extra_info": {"split": "train"}}
            for thing, truth in (("fruit", "apple"), ("colour", "blue"))]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tok = build_char_tokenizer(string.printable)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    data_config = config.data
    cls = get_dataset_class(data_config)
    assert cls.__name__ == "MultiAnswerDataset"
    dataset = cls(data_files=[str(path)], tokenizer=tok, config=data_config)
    item = dataset[1]
    turns = item["raw_prompt"]
    assert turns[0] == {"role": "system", "content": "Be brief."}
    assert turns[1]["content"].startswith("Name a colour.") and "<response_3>" in turns[1]["content"]
    assert item["extra_info"]["answers"] == 3 and item["extra_info"]["index"] == 1 and item["index"] == 1


@pytest.fixture(scope="module")
def own_export(tmp_path_factory):
    """``vpo data export --reward-funcs ... --source ... --format verl --answers 3``."""
    from vpo.cli import main

    folder = tmp_path_factory.mktemp("own")
    source = folder / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"Name a {thing}.", "keyword": truth, "example_id": thing}) + "\n"
                              for thing, truth in (("fruit", "apple"), ("colour", "blue"), ("planet", "mars"))))
    assert main(["data", "export", "--reward-funcs", "own_reward_funcs:keyword,own_reward_funcs:brevity",
                 "--source", str(source), "--out", str(folder / "out"), "--format", "verl", "--answers", "3",
                 "--train", "2", "--test", "1"]) == 0
    import pyarrow.parquet as pq

    return folder / "out", pq.read_table(folder / "out" / "train.parquet").to_pylist()


def own_hand_matrix(answers: list[str], keyword: str) -> np.ndarray:
    rows: list[list[float]] = []
    for answer in answers:
        vector = [float(keyword in answer.lower()), 1.0 / max(1, len(answer.split()))]
        if answer.strip() and vector not in rows:
            rows.append(vector)
    return np.array(rows + [[0.0, 0.0]] * (3 - len(rows)))


def group_key(extra_info: dict):
    """The row's group key as verl's adapter reads it (its ``row_key``: example_id, where it has one)."""
    from vpo.integrations import verl as adapter

    return adapter.row_key(extra_info) if hasattr(adapter, "row_key") else extra_info["index"]


def test_exported_own_rewards_scored_by_verl_and_openrlhf_reward_functions(own_export, tmp_path):
    from vpo.integrations import openrlhf
    from vpo.integrations.verl import compute_score

    out, rows = own_export
    row = rows[0]
    assert row["data_source"] == "own_rewards" and "<response_3>" in row["prompt"][-1]["content"]
    params = json.loads(row["extra_info"]["task_params"])
    assert params == {"reward_funcs": "own_reward_funcs:keyword,own_reward_funcs:brevity"}
    keyword = json.loads(row["reward_model"]["ground_truth"])["keyword"]
    chain = f"<response_1>A {keyword}</response_1><response_2>{keyword}</response_2><response_3>no idea</response_3>"
    expected = float(set_scores([own_hand_matrix(split(chain), keyword)],
                                group_weights(group_key(row["extra_info"]), 2, num_weights=K, seed=SEED))[0])
    verl_out = compute_score(row["data_source"], chain, row["reward_model"]["ground_truth"], row["extra_info"])
    assert verl_out["score"] == pytest.approx(expected, abs=1e-12)
    jsonl = tmp_path / "train.jsonl"
    assert openrlhf.convert(str(out / "train.parquet"), str(jsonl)) == len(rows)
    line = json.loads(jsonl.read_text().splitlines()[0])
    spec = importlib.util.spec_from_file_location("reward_func", openrlhf.__file__)  # as OpenRLHF loads it
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = module.reward_func(["PROMPT" + chain], ["PROMPT"], [line["label"]])
    assert got["rewards"] == pytest.approx(expected, abs=1e-12)


def test_a_string_reward_key_is_refused_not_read_as_a_number():
    """verl's default_compute_score on math_dapo data returns {"score", "acc", "pred"}: "pred" is the
    extracted answer ("8"), which float() would silently turn into the reward 8.0."""
    from vpo.integrations.verl_rewards import compute_score

    kwargs = {"score_path": "pkg://verl.utils.reward_score", "score_name": "default_compute_score"}
    chain = "<response_1>Answer: 8</response_1><response_2>Answer: 7</response_2>"
    info = {"index": 0, "answers": 2}
    out = compute_score("math_dapo", chain, "8", info, reward_keys=["acc"], **kwargs)  # a bool: 1.0 or 0.0
    assert out["best_acc"] == 1.0 and json.loads(out["objective_best"]) == [1.0]
    with pytest.raises(ValueError, match=r"key 'pred' of default_compute_score holds the string '8', not a number"):
        compute_score("math_dapo", chain, "8", info, reward_keys=["acc", "pred"], **kwargs)


def test_compute_score_falls_back_to_index_when_example_id_is_none(user_file):
    """A row whose extra_info holds example_id None (a column some rows leave empty) is keyed on its
    index, as the task-based adapter keys it (vpo.integrations.verl.row_key)."""
    from vpo.integrations.verl_rewards import compute_score

    kwargs = {"score_path": str(user_file), "score_name": "compute_score", "reward_keys": ["accuracy", "brevity"]}
    chain = "<response_1>An apple</response_1><response_2>pear</response_2>"
    by_none = compute_score("d", chain, "apple", {"example_id": None, "index": 7, "answers": 3}, **kwargs)
    expected = set_scores([hand_matrix(split(chain), "apple")], group_weights(7, 2, num_weights=K, seed=SEED))
    assert by_none["score"] == pytest.approx(float(expected[0]), abs=1e-12)
    assert by_none["score"] == compute_score("d", chain, "apple", {"index": 7, "answers": 3}, **kwargs)["score"]
    with pytest.raises(ValueError, match="example_id and extra_info.index are missing"):
        compute_score("d", chain, "apple", {"example_id": None, "answers": 3}, **kwargs)


@pytest.mark.parametrize("blank", ["", "   "])
def test_compute_score_falls_back_to_index_when_example_id_is_blank(user_file, blank):
    """An empty or whitespace example_id is no key either (before: one shared key for every such row)."""
    from vpo.integrations.verl_rewards import compute_score

    kwargs = {"score_path": str(user_file), "score_name": "compute_score", "reward_keys": ["accuracy", "brevity"]}
    chain = "<response_1>An apple</response_1><response_2>pear</response_2>"
    for index in (7, 8):
        by_blank = compute_score("d", chain, "apple", {"example_id": blank, "index": index, "answers": 3}, **kwargs)
        assert by_blank["score"] == compute_score("d", chain, "apple", {"index": index, "answers": 3}, **kwargs)["score"]
    with pytest.raises(ValueError, match="example_id and extra_info.index are missing"):
        compute_score("d", chain, "apple", {"example_id": blank, "answers": 3}, **kwargs)

"""vpo.rewards: a user's reward functions scored answer by answer into chain matrices (hand-computed),
the None rule, scaling and its warning, reward models as objectives, the effective dimension."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vpo.rewards import (
    CHAIN_RULE,
    CHAIN_TAG,
    ChainRewards,
    RewardScaleWarning,
    effective_dimension,
    load_reward_funcs,
    objective_diagnostics,
    rewrite_chain_prompt,
    rollout_group_keys,
    score_chains,
)


def chain(*answers):
    return "".join(f"<response_{i}>{a}</response_{i}>" for i, a in enumerate(answers, 1))


def length(completions, **kwargs):
    return [len(c) / 10 for c in completions]


def has_x(completions, label, **kwargs):
    """1/0 whether the answer has an 'x'; None ("does not apply") on rows labelled 'n/a', and
    for the answer 'q' anywhere."""
    return [None if lab == "n/a" or c == "q" else float("x" in c) for c, lab in zip(completions, label, strict=True)]


def test_score_chains_matches_hand_computed_matrices():
    prompts = ["p1", "p1", "p2", "p2", "p3"]
    completions = [
        chain("ab", "ab", "xyz"),           # a duplicate: rows (0.2, 0), (0.3, 1), then a zero row
        "no tags at all",                   # unparseable: all zeros
        chain("x", "", "yy"),               # a blank answer is no answer
        chain("q"),                         # has_x is None for 'q' only: counted as 0 (p2 has other values)
        chain("xx", "abc"),                 # p3 is labelled n/a: has_x dropped for the whole group
    ]
    label = ["ok", "ok", "ok", "ok", "n/a"]
    scored = score_chains([length, has_x], prompts, completions, answers=3, label=label)
    assert isinstance(scored, ChainRewards) and scored.names == ("length", "has_x")
    expected = [
        [[0.2, 0.0], [0.3, 1.0], [0.0, 0.0]],
        [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        [[0.1, 1.0], [0.2, 0.0], [0.0, 0.0]],
        [[0.1, 0.0], [0.0, 0.0], [0.0, 0.0]],
        [[0.2], [0.3], [0.0]],
    ]
    for got, want in zip(scored.matrices, expected, strict=True):
        np.testing.assert_allclose(got, np.array(want), atol=1e-12)
        assert got.dtype == np.float64
    assert [k.tolist() for k in scored.kept] == [[0, 1]] * 4 + [[0]]
    np.testing.assert_allclose(scored.dense(4), [[0.2, 0.0], [0.3, 0.0], [0.0, 0.0]])
    s = scored.stats
    assert s["answers_parsed"] == pytest.approx(8 / 5)        # 3 + 0 + 2 + 1 + 2 answers
    assert s["duplicate_rate"] == pytest.approx(1 / 8)
    assert s["unparseable"] == pytest.approx(1 / 5)
    assert s["none/has_x"] == 1 and s["dropped/has_x"] == 1 and s["none/length"] == 0
    # best answer per chain, mean over the chains that kept the objective
    assert s["objective/has_x"] == pytest.approx((1 + 0 + 1 + 0) / 4)
    assert s["objective/length"] == pytest.approx((0.3 + 0 + 0.2 + 0.1 + 0.3) / 5)


def test_functions_get_single_answers_with_aligned_columns():
    calls = []

    def record(prompts, completions, completion_ids, **columns):
        calls.append((list(prompts), list(completions), columns))
        return [1.0] * len(completions)

    chat = [{"role": "assistant", "content": chain("A", "B")}]
    scored = score_chains([record], ["p0", "p1", "p2"], [chain("a0", "b0", "c0"), "junk", chat], answers=3,
                          row=[0, 1, 2], gold=["g0", "g1", "g2"])
    assert len(calls) == 1                                   # once, on every answer
    prompts, completions, columns = calls[0]
    assert completions == ["a0", "b0", "c0", [{"role": "assistant", "content": "A"}],
                           [{"role": "assistant", "content": "B"}]]   # the form TRL would pass
    assert prompts == ["p0"] * 3 + ["p2"] * 2
    assert columns == {"row": [0, 0, 0, 2, 2], "gold": ["g0"] * 3 + ["g2"] * 2}
    assert scored.stats["answers_parsed"] == pytest.approx(5 / 3)
    # the call hook gets the flat answers and columns; its outputs are what gets scored
    seen = {}

    def call(p, c, cols):
        seen.update(prompts=p, completions=c, columns=cols)
        return [np.arange(len(c), dtype=float), np.ones((len(c), 2))]

    scored = score_chains([length, record], ["p0"], [chain("a", "b")], answers=2, call=call, reward_names=[
        "first", ("h1", "h2")], gold=["g"])
    assert seen["completions"] == ["a", "b"] and seen["columns"] == {"gold": ["g", "g"]}
    assert scored.names == ("first", "h1", "h2")
    np.testing.assert_allclose(scored.matrices[0], [[0, 1, 1], [1, 1, 1]])


def test_async_and_vector_functions():
    async def later(completions, **kwargs):
        return [0.5] * len(completions)

    def two(completions, **kwargs):
        return [[1.0, 0.0] if c == "a" else [0.0, None] for c in completions]

    two.objective_names = ("ones", "zeros")
    scored = score_chains([later, two], ["p", "p"], [chain("a", "b"), chain("b")], answers=2)
    assert scored.names == ("later", "ones", "zeros")
    np.testing.assert_allclose(scored.matrices[0], [[0.5, 1, 0], [0.5, 0, 0]])
    assert scored.stats["none/zeros"] == 2


def test_none_for_every_answer_drops_the_objective_for_the_group_only():
    def maybe(completions, prompts, **kwargs):
        return [None if p == "skip" else 1.0 for p in prompts]

    scored = score_chains([length, maybe], ["skip", "skip", "keep"], [chain("ab"), "nothing", chain("a")],
                          answers=2, group_ids=["g", "g", "h"])
    assert [k.tolist() for k in scored.kept] == [[0], [0], [0, 1]]
    assert scored.stats["dropped/maybe"] == 1 and scored.stats["none/maybe"] == 0
    # groups follow example_id when the data has one, else the prompt
    assert rollout_group_keys(["a", "a"], {"example_id": [3, 4]}) == ["3", "4"]   # as TRL, verl and OpenRLHF key rows
    assert rollout_group_keys([[{"role": "user", "content": "x"}]]) == ['[{"content": "x", "role": "user"}]']
    everything_none = score_chains([lambda completions, **k: [None] * len(completions)], ["p"], [chain("a")],
                                   answers=2)
    assert everything_none.matrices[0].shape == (2, 0) and everything_none.kept[0].size == 0


def test_scaling_and_its_warning():
    def logit(completions, **kwargs):
        return [3.0 if "x" in c else -1.0 for c in completions]

    logit.__name__ = "logit"
    with pytest.warns(RewardScaleWarning, match=r"'logit'.*outside \[0, 1\].*scaling="):
        raw = score_chains([logit], ["p"], [chain("x", "y")], answers=2)
    np.testing.assert_allclose(raw.matrices[0], [[3.0], [-1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning once the objective is scaled
        sig = score_chains([logit], ["p"], [chain("x", "y")], answers=2, scaling={"logit": "sigmoid"})
        span = score_chains([logit], ["p"], [chain("x", "y")], answers=2, scaling=(-1.0, 5.0))
        minmax = score_chains([logit, length], ["p"], [chain("x", "y")], answers=2, scaling="minmax")
        in_range = score_chains([length], ["p"], [chain("x")], answers=2)
    np.testing.assert_allclose(sig.matrices[0][:, 0], 1 / (1 + np.exp(-np.array([3.0, -1.0]))))
    np.testing.assert_allclose(span.matrices[0][:, 0], [4 / 6, 0.0])
    np.testing.assert_allclose(minmax.matrices[0], [[1.0, 0.0], [0.0, 0.0]])  # equal lengths: 0
    assert in_range.matrices[0][0, 0] == pytest.approx(0.1)

    def none_or_logit(completions, **kwargs):
        return [None if c == "n" else 2.0 for c in completions]

    # a None is 0 after scaling ("does not apply"), not sigmoid(0) = 0.5
    scored = score_chains([none_or_logit], ["p"], [chain("n", "y")], answers=2, scaling="sigmoid")
    np.testing.assert_allclose(sorted(scored.matrices[0][:, 0]), [0.0, 1 / (1 + np.exp(-2.0))])
    for bad, needle in [("log", "must be one of"), ((1.0, 1.0), "low < high"), ({"nope": "sigmoid"}, "unknown")]:
        with pytest.raises(ValueError, match=needle):
            score_chains([logit], ["p"], [chain("x")], answers=2, scaling=bad)


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        score_chains([length], ["a", "b"], ["c"])
    with pytest.raises(ValueError, match="column 'label' has 1 values for 2"):
        score_chains([length], ["a", "b"], ["c", "d"], label=["x"])
    with pytest.raises(ValueError, match="returned 1 rewards for 2 answers"):
        score_chains([lambda completions, **k: [1.0]], ["a"], [chain("x", "y")], answers=2)
    with pytest.raises(ValueError, match="answers must be a positive integer"):
        score_chains([length], ["a"], ["c"], answers=0)
    with pytest.raises(ValueError, match="distinct"):
        score_chains([length, length], ["a"], [chain("x")])


def test_prompt_rewrite_for_plain_and_chat_prompts():
    plain = rewrite_chain_prompt("Name a fruit.", 3)
    assert plain.startswith("Name a fruit.") and "<response_1>" in plain and "<response_3>" in plain
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a fruit."}]
    rewritten = rewrite_chain_prompt(chat, 3)
    assert rewritten[0] == chat[0] and rewritten[1]["content"] == plain
    assert chat[1]["content"] == "Name a fruit."                  # the input is not modified
    blocks = [{"role": "user", "content": [{"type": "text", "text": "Name a fruit."}]}]
    assert rewrite_chain_prompt(blocks, 3)[0]["content"][0]["text"] == plain
    assert CHAIN_RULE.tag == "response"
    with pytest.raises(ValueError, match="user message"):
        rewrite_chain_prompt([{"role": "system", "content": "x"}], 2)


def test_load_reward_funcs_by_path(tmp_path):
    module = tmp_path / "my_rewards.py"
    module.write_text("def short(completions, **kw):\n    return [1.0 / (1 + len(c)) for c in completions]\n")
    funcs = load_reward_funcs(f"vpo.rewards:completion_text,vpo.chains.dedup,{module}:short,org/reward-model")
    assert [getattr(f, "__name__", f) for f in funcs] == ["completion_text", "dedup", "short", "org/reward-model"]
    assert funcs[2](["ab"]) == [1 / 3]
    assert load_reward_funcs(["vpo.rewards:completion_text"])[0].__name__ == "completion_text"
    for bad, needle in [("nope.mod:f", "cannot import"), ("vpo.rewards:nothing_here", "no callable"), ("", "no reward")]:
        with pytest.raises(ValueError, match=needle):
            load_reward_funcs(bad)


# ------------------------------------------------------------------------------------------------
# the diagnostic
# ------------------------------------------------------------------------------------------------
def test_effective_dimension_of_collinear_and_independent_objectives():
    rng = np.random.default_rng(0)
    base = rng.uniform(size=2000)
    collinear = np.stack([base, 0.5 * base, 0.2 + 0.3 * base], axis=1)
    assert effective_dimension(collinear) == pytest.approx(1.0, abs=1e-9)
    independent = rng.uniform(size=(20000, 3))
    assert effective_dimension(independent) == pytest.approx(3.0, abs=0.05)
    diag = objective_diagnostics(collinear)
    np.testing.assert_allclose(diag["correlation"], np.ones((3, 3)), atol=1e-9)
    assert diag["mean_abs_correlation"] == pytest.approx(1.0)
    diag = objective_diagnostics(independent)
    assert np.abs(diag["correlation"] - np.eye(3)).max() < 0.05
    # two independent objectives and a copy of one: between 1 and 3
    assert 1.5 < effective_dimension(np.column_stack([independent[:, :2], independent[:, 0]])) < 2.5
    # no spread, too few rows: undefined (NaN), never a division error; NaN rows are left out
    assert np.isnan(effective_dimension(np.ones((5, 2)))) and np.isnan(effective_dimension(np.zeros((1, 3))))
    with_nan = np.vstack([collinear[:50], [[np.nan, 1.0, 1.0]]])
    assert effective_dimension(with_nan) == pytest.approx(1.0)
    constant = objective_diagnostics(np.column_stack([base, np.ones_like(base)]))["correlation"]
    np.testing.assert_allclose(constant, np.eye(2))


def test_score_chains_reports_the_effective_dimension():
    def a(completions, **kwargs):
        return [len(c) / 10 for c in completions]

    def b(completions, **kwargs):
        return [len(c) / 20 for c in completions]

    def c(completions, **kwargs):
        return [c_.count("x") / max(len(c_), 1) for c_ in completions]

    completions = [chain("x", "yyy", "xzzzz"), chain("xx", "y"), chain("abcxxx", "q")]
    collinear = score_chains([a, b], ["p"] * 3, completions)
    assert collinear.stats["effective_dim"] == pytest.approx(1.0) and collinear.stats["mean_abs_correlation"] == 1
    spread = score_chains([a, c], ["p"] * 3, completions)
    assert spread.stats["effective_dim"] > 1.3
    assert spread.correlation.shape == (2, 2)


# ------------------------------------------------------------------------------------------------
# reward models (config-built, CPU)
# ------------------------------------------------------------------------------------------------
ALPHABET = "abcxyz pq<>/_0123456789respon"


def build_reward_model(tokenizer, labels, seed):
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=labels,
                         pad_token_id=tokenizer.pad_token_id)
    return Qwen2ForSequenceClassification(config).eval()


def test_reward_models_as_objectives():
    pytest.importorskip("transformers")
    import torch

    from vpo.models import build_char_tokenizer

    tok = build_char_tokenizer(ALPHABET, padding_side="right")
    single, multi = build_reward_model(tok, 1, 0), build_reward_model(tok, 2, 1)
    prompts = ["pq", "pq"]
    completions = [chain("ab", "xyz"), chain("c")]
    scored = score_chains([single, multi], prompts, completions, answers=2, reward_names=["quality", ("x", "y")],
                          reward_processing_classes=[tok, tok], scaling="sigmoid")
    assert scored.names == ("quality", "x", "y")
    # by hand: each answer on its own, prompt + answer, every head, then the sigmoid
    rows = []
    for answer in ("ab", "xyz", "c"):
        ids = torch.tensor([tok("pq" + answer, add_special_tokens=False)["input_ids"]])
        with torch.inference_mode():
            logits = np.concatenate([single(input_ids=ids).logits[0].numpy(), multi(input_ids=ids).logits[0].numpy()])
        rows.append(1 / (1 + np.exp(-logits.astype(np.float64))))
    np.testing.assert_allclose(scored.matrices[0], np.stack(rows[:2]), atol=1e-5)
    np.testing.assert_allclose(scored.matrices[1], np.stack([rows[2], np.zeros(3)]), atol=1e-5)
    # the heads are named from the model when no names are given; two unnamed models clash
    assert score_chains([multi], prompts, completions, answers=2, reward_processing_classes=tok,
                        scaling="sigmoid").names == ("Qwen2ForSequenceClassification/0",
                                                     "Qwen2ForSequenceClassification/1")
    with pytest.raises(ValueError, match="distinct"):
        score_chains([single, multi, single], prompts, completions, answers=2, reward_processing_classes=tok)


def test_score_chains_at_one_answer_scores_the_whole_completion_as_the_trainer_does():
    completions = ["xx yy", chain("abc")]
    with pytest.warns(RewardScaleWarning, match="'length'"):  # the whole chain is longer than 10 characters
        scored = score_chains([length], ["p", "q"], completions, answers=1)
    np.testing.assert_allclose(np.vstack(scored.matrices), [[0.5], [len(chain("abc")) / 10]])
    tagged = score_chains([length], ["p", "q"], completions, answers=1, tag=CHAIN_TAG)
    np.testing.assert_allclose(np.vstack(tagged.matrices), [[0.0], [0.3]])


# ------------------------------------------------------------------------------------------------
# functions that judge the whole completion; the untagged fallback; a missing column
# ------------------------------------------------------------------------------------------------
def test_a_chain_level_function_is_called_once_per_completion_and_shared_by_every_row():
    from vpo.rewards import chain_level

    calls = []

    @chain_level
    def short_chain(prompts, completions, completion_ids, **kwargs):
        calls.append((list(prompts), list(completions), completion_ids))
        return [1.0 - len(c) / 100 for c in completions]

    completions = [chain("ab", "ab", "xyz"), "no tags"]
    scored = score_chains([length, short_chain], ["p1", "p2"], completions, answers=3, completion_ids=[[1, 2], [3]])
    assert calls == [(["p1", "p2"], completions, [[1, 2], [3]])]   # once, on the whole completions
    c0, c1 = 1 - len(completions[0]) / 100, 1 - len(completions[1]) / 100
    # the shared objective: on every row, padding included (an absent answer still has the chain's value)
    np.testing.assert_allclose(scored.matrices[0], [[0.2, c0], [0.3, c0], [0.0, c0]])
    np.testing.assert_allclose(scored.matrices[1], [[0.0, c1]] * 3)
    assert scored.names == ("length", "short_chain")
    assert scored.stats["objective/short_chain"] == pytest.approx((c0 + c1) / 2)
    assert scored.stats["duplicate_rate"] == pytest.approx(1 / 3)   # dedup reads the answers, as before


def test_trls_shipped_chain_level_functions_are_recognised():
    pytest.importorskip("trl")
    from trl.rewards import (accuracy_reward, get_repetition_penalty_reward, get_soft_overlong_punishment,
                             think_format_reward)

    from vpo.rewards import is_chain_level

    assert is_chain_level(think_format_reward) and is_chain_level(get_soft_overlong_punishment(100, 20))
    assert is_chain_level(get_repetition_penalty_reward())
    assert not is_chain_level(accuracy_reward) and not is_chain_level(length)
    overlong = get_soft_overlong_punishment(10, 4)
    overlong.chain_level = False  # a declaration wins
    assert not is_chain_level(overlong)
    # an 18-token completion of 2 answers (past 2 x (10 - 4): the budget is one answer's, x m) is punished as a
    # whole, never through one short answer
    scored = score_chains([length, get_soft_overlong_punishment(10, 4)], ["p"], [chain("a", "b")], answers=2,
                          completion_ids=[list(range(18))], scaling={"soft_overlong_punishment_reward": (-1.0, 0.0)})
    np.testing.assert_allclose(scored.matrices[0][:, 1], [0.25, 0.25])   # (20 - 8 - 18) / 8 = -0.75, scaled


def test_the_untagged_fallback_scores_the_whole_completion_as_one_answer():
    plain = score_chains([length], ["p", "p"], ["abcd", chain("ab")], answers=3)
    fallback = score_chains([length], ["p", "p"], ["  abcd ", chain("ab")], answers=3, untagged_fallback=True)
    np.testing.assert_allclose(plain.matrices[0], np.zeros((3, 1)))
    np.testing.assert_allclose(fallback.matrices[0], [[0.4], [0.0], [0.0]])
    np.testing.assert_allclose(fallback.matrices[1], [[0.2], [0.0], [0.0]])
    assert fallback.stats["parse_rate"] == 0.5 and fallback.stats["unparseable"] == 0.0
    assert fallback.stats["answers_parsed"] == pytest.approx(0.5)   # the fallback's answer is not a tagged one


def test_a_missing_dataset_column_is_named_before_any_call():
    from vpo.reward_failures import RewardContractError, RewardFailurePolicy, RewardFailures

    def accuracy(completions, solution, **kwargs):
        return [1.0] * len(completions)

    def staged(completions, trainer_state, **kwargs):
        return [1.0] * len(completions)

    failures = RewardFailures(RewardFailurePolicy(), names=["accuracy"])
    with pytest.raises(RewardContractError, match=r"'accuracy' needs the dataset column 'solution', which the data "
                                                  r"does not have \(its columns: label\)"):
        score_chains([accuracy], ["p"], [chain("a")], answers=2, failures=failures, label=["x"])
    assert failures.totals()["calls"] == 0
    with pytest.raises(RewardContractError, match="'staged' needs 'trainer_state', which only a trainer passes"):
        score_chains([staged], ["p"], [chain("a")], answers=2)
    assert score_chains([accuracy], ["p"], [chain("a")], answers=2, solution=["a"]).matrices[0][0, 0] == 1.0

"""vpo.step_metrics: the metrics every engine logs, by hand, and the watch on the chain format."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vpo.step_metrics import (LOW_PARSE_RATE, PARSE_WATCH_BATCHES, ChainFormatWarning, ParseWatch, chain_metrics,
                              pool_metrics)


def test_chain_metrics_by_hand_with_the_parse_rate_and_objectives_a_rollout_lacks():
    got = chain_metrics(answers=[3, 0, 1, 0], parsed=[3, 1, 1, 0], duplicates=[1, 0, 0, 0],
                        best=[[1.0, 0.5], [0.0, np.nan], [0.5, 1.0], [0.0, np.nan]], names=["a", "b"], parse_rate=True)
    assert got == {"vpo/answers_parsed": 1.0, "vpo/duplicate_rate": 0.2, "vpo/parse_rate": 0.5,
                   "vpo/objective/a": 0.375, "vpo/objective/b": 0.75}
    assert "vpo/parse_rate" not in chain_metrics(answers=[1], parsed=[1], duplicates=[0])
    assert pool_metrics([3, 3, 2, 0], ["p", "p", "q", "q"]) == {"vpo/mean_pool_size": 4.0}


def test_the_parse_watch_warns_once_at_the_start_and_never_at_one_answer():
    def warned(watch, batches):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for parsed, total in batches:
                watch.update(parsed, total)
        return [str(w.message) for w in caught if issubclass(w.category, ChainFormatWarning)]

    assert LOW_PARSE_RATE == 0.5 and PARSE_WATCH_BATCHES == 3
    messages = warned(ParseWatch(3), [(0, 16)] * 5)
    assert len(messages) == 1 and "only 0 of 16 completions (0%)" in messages[0]
    assert "untagged_fallback=True" in messages[0] and "`vpo warmup`" in messages[0]
    assert warned(ParseWatch(3), [(12, 16), (5, 16), (8, 16)]) == []     # 25 of 48 over the first batches
    late = warned(ParseWatch(3), [(12, 16), (1, 16), (1, 16)])          # the share so far: 13 of 32 at the second
    assert len(late) == 1 and "13 of 32" in late[0] and "first 2 batch(es)" in late[0]
    assert warned(ParseWatch(3), [(16, 16)] * 3 + [(0, 16)]) == []      # past the first batches: not watched
    assert warned(ParseWatch(1), [(0, 16)]) == []                       # m = 1 has no chain format
    on = warned(ParseWatch(3, fallback=True), [(0, 8)])
    assert len(on) == 1 and "untagged fallback is on" in on[0]


@pytest.mark.parametrize("rate", [0.0, 0.25])
def test_the_parse_watch_names_its_caller(rate):
    with pytest.warns(ChainFormatWarning, match=r"^VPOReward: only"):
        ParseWatch(2, where="VPOReward").update(int(rate * 8), 8)


def test_the_shares_of_chains_that_wrote_more_and_fewer_than_m_answers():
    from vpo.chains import written_answers

    chains = ["<r_1>a</r_1><r_2>b</r_2><r_3>c</r_3><r_4>d</r_4>",   # four numbered answers for m = 3
              "<r_1>a</r_1><r_2>b</r_2><r_3>c</r_3><r_1>a again</r_1>",   # a number written twice
              "<r_1>a</r_1><r_2> </r_2><r_3>c</r_3><r_4></r_4>",     # blank blocks are not answers
              "no tags at all"]
    written = [written_answers(text, "r") for text in chains]
    assert written == [4, 4, 2, 0]
    got = chain_metrics(answers=[3, 3, 2, 0], parsed=[3, 3, 2, 0], duplicates=[0] * 4, written=written, m=3)
    assert got["vpo/over_m_rate"] == 0.5
    assert got["vpo/under_m_rate"] == 0.25  # the blank blocks' chain; the untagged one is a parse failure
    single = chain_metrics(answers=[1], parsed=[1], duplicates=[0], written=[4], m=1)
    assert "vpo/over_m_rate" not in single and "vpo/under_m_rate" not in single


def test_an_objective_that_never_moves_warns_once_naming_it():
    from vpo.step_metrics import STILL_BATCHES, StillObjectiveWarning, StillObjectiveWatch

    def warned(batches, names=("accuracy", "brevity")):
        watch = StillObjectiveWatch()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for values in batches:
                watch.update(values, names)
        return [str(w.message) for w in caught if issubclass(w.category, StillObjectiveWarning)]

    moving = [[0.0, 0.2], [0.0, 0.9]]
    assert STILL_BATCHES == 5
    messages = warned([moving] * 8)
    assert len(messages) == 1 and "'accuracy' (0)" in messages[0] and "brevity" not in messages[0]
    assert "10 answers of the first 5 batches" in messages[0]
    assert warned([moving] * 4) == []                                      # not yet judged
    assert warned([moving] * 4 + [[[1.0, 0.3]]]) == []                     # it moved in the fifth batch
    assert warned([np.zeros((0, 2))] * 9 + [moving]) == []                 # batches without answers do not count
    assert warned([[[np.nan, 0.1], [np.nan, 0.4]]] * 5) == []              # no value yet: not judged
    both = warned([[[1.0, 0.5]]] * 5)
    assert len(both) == 1 and "objectives 'accuracy' (1), 'brevity' (0.5)" in both[0]

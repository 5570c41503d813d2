"""The check every reward's output goes through (llm_rl.rewards.checked): invalid values named by function and
sample, and `on_invalid: skip`."""

from __future__ import annotations

import math

import pytest
import torch

from llm_rl.errors import RewardError
from llm_rl.rewards import CheckedReward
from tests.rewards.conftest import call


def constant(values):
    """A reward function that returns fixed values, whatever it is given."""

    def reward(prompts, completions, completion_ids=None, **kwargs):
        return values

    return reward


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1.0], r"reward 'bad' returned 1 values for 3 completions"),
        ("1.0", r"reward 'bad' returned a str, expected a list"),
        ([1.0, "2", 3.0], r"reward 'bad' returned '2' for sample 1"),
        ([1.0, 2.0, True], r"reward 'bad' returned True for sample 2"),
        ([1.0, math.nan, 3.0], r"reward 'bad' returned nan for sample 1"),
        ([1.0, 2.0, -math.inf], r"reward 'bad' returned -inf for sample 2"),
    ],
)
def test_invalid_outputs_name_the_function_and_sample(values, message):
    checked = CheckedReward(constant(values), "bad")
    with pytest.raises(RewardError, match=message):
        call(checked, ["a", "b", "c"])


def test_none_numpy_and_tensor_values_pass():
    import numpy as np

    assert call(CheckedReward(constant([None, 1, np.float32(0.5)]), "ok"), ["a", "b", "c"]) == [
        None,
        1.0,
        0.5,
    ]
    assert call(CheckedReward(constant(torch.tensor([1.0, 2.0, 3.0])), "ok"), ["a", "b", "c"]) == [
        1.0,
        2.0,
        3.0,
    ]


def test_skip_turns_invalid_values_into_none_and_counts_them():
    checked = CheckedReward(constant([1.0, math.nan, "x", None, math.inf]), "shaky", on_invalid="skip")
    logged = []
    values = checked(prompts=["p"] * 5, completions=["c"] * 5, log_metric=lambda n, v: logged.append((n, v)))
    assert values == [1.0, None, None, None, None]
    assert (checked.last_skipped, checked.skipped) == (3, 3)
    assert logged == [("rewards/shaky/skipped", 3.0)]
    call(checked, ["c"] * 5)
    assert (checked.last_skipped, checked.skipped) == (3, 6)
    with pytest.raises(RewardError, match="returned 1 values for 2 completions"):
        CheckedReward(constant([1.0]), "short", on_invalid="skip")(prompts=["p"] * 2, completions=["c"] * 2)

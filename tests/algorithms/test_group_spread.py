"""The groups' reward spread (`reward/group_std`) of TRL group trainers, worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from llm_rl.algorithms.trl_groups.group_spread import (
    RewardLog,
    mean_group_spread,
    rollouts_in_global_order,
    weighted_rewards,
)

NAN = math.nan


def test_rewards_are_weighted_sums_and_unscored_completions_stay_unscored() -> None:
    per_function = torch.tensor([[1.0, 2.0], [NAN, 3.0], [NAN, NAN]])
    rewards = weighted_rewards(per_function, torch.tensor([1.0, 0.5]))
    assert rewards[:2].tolist() == [2.0, 1.5]
    assert math.isnan(rewards[2])  # every function returned None: no reward, not 0


def test_the_spread_is_each_groups_population_std_averaged() -> None:
    # groups [0, 2] (std 1) and [1, 1] (std 0)
    assert mean_group_spread(torch.tensor([0.0, 2.0, 1.0, 1.0]), 2) == pytest.approx(0.5)


def test_unscored_completions_are_left_out_of_their_group() -> None:
    # group [0, 4, unscored]: std of [0, 4] is 2; a group with none scored is left out
    rewards = torch.tensor([0.0, 4.0, NAN, NAN, NAN, NAN])
    assert mean_group_spread(rewards, 3) == pytest.approx(2.0)


def test_the_log_returns_the_values_and_forgets_them() -> None:
    log = RewardLog(2)
    first = log.record(0, lambda prompts, completions, **_: [1.0, None])
    second = log.record(1, lambda prompts, completions, **_: [0.5, 0.25])
    assert first(prompts=["a", "b"], completions=["x", "y"]) == [1.0, None]
    second(prompts=["a", "b"], completions=["x", "y"])
    table = log.take()
    assert table.shape == (1, 2, 2)  # rollouts x completions x functions
    assert table[0, 0].tolist() == [1.0, 0.5]
    assert math.isnan(table[0, 1, 0]) and table[0, 1, 1] == 0.25
    assert log.take() is None


def test_gathered_rollouts_come_back_in_the_order_groups_are_formed() -> None:
    # 2 processes x 2 rollouts x 2 completions x 1 function, stacked by process as a gather does
    rank0 = torch.tensor([[[0.0], [1.0]], [[10.0], [11.0]]])
    rank1 = torch.tensor([[[2.0], [3.0]], [[12.0], [13.0]]])
    ordered = rollouts_in_global_order(torch.cat([rank0, rank1]), processes=2)
    assert ordered[..., 0].tolist() == [[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0]]

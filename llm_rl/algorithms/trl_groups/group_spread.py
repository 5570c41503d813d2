"""The reward spread inside each prompt's group (`reward/group_std`), read from the reward functions a
TRL group trainer calls, not from its private reward step.

TRL logs the spread over the whole batch; the spread inside each group is what group advantages are
made of, so a group spread near zero means no learning signal. The reward is TRL's logged one: each
function's values weighted and summed, a completion that every function left unscored (None) counting
as no reward at all rather than 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch


def weighted_rewards(per_function: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each completion's reward: the weighted sum of its functions' values (rows x functions), NaN where
    every function returned None (NaN), as TRL weighs them."""
    summed = (per_function * weights.unsqueeze(0)).nansum(dim=1)
    return summed.masked_fill(per_function.isnan().all(dim=1), math.nan)


def group_spreads(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The population standard deviation of the rewards inside each group of `group_size` consecutive
    completions; unscored completions (NaN) are left out, and a group with none scored is NaN."""
    groups = rewards.view(-1, group_size)
    mean = groups.nanmean(dim=1, keepdim=True)
    return (groups - mean).pow(2).nanmean(dim=1).sqrt()


def mean_group_spread(rewards: torch.Tensor, group_size: int) -> float:
    """`group_spreads` averaged over the groups with a scored completion (NaN when none has one)."""
    return float(group_spreads(rewards, group_size).nanmean())


class RewardLog:
    """The values each reward function returned in each rollout since the log last read them.

    `record(f)` wraps a reward function so that its calls are kept; the wrapped function returns what
    `f` returns, so the trainer scores exactly as before.
    """

    def __init__(self, functions: int) -> None:
        self.calls: list[list[list[float | None]]] = [[] for _ in range(functions)]

    def record(self, index: int, function: Callable[..., Sequence[float | None]]) -> RecordedReward:
        return RecordedReward(function, self.calls[index])

    def take(self) -> torch.Tensor | None:
        """The rollouts kept so far as rollouts x completions x functions (NaN for None), then forgotten;
        None when no rollout was scored since the last take."""
        rollouts = min(len(calls) for calls in self.calls)
        if rollouts == 0:
            return None
        table = torch.tensor(
            [
                [[math.nan if value is None else value for value in calls[r]] for calls in self.calls]
                for r in range(rollouts)
            ],
            dtype=torch.float32,
        ).transpose(1, 2)
        for calls in self.calls:
            del calls[:rollouts]
        return table


class RecordedReward:
    """A reward function whose every call's values are appended to a list (`RewardLog.record`)."""

    def __init__(self, function: Callable[..., Sequence[float | None]], calls: list[Any]) -> None:
        self.function = function
        self.calls = calls
        self.__name__ = getattr(function, "__name__", type(function).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Sequence[float | None]:
        values = self.function(*args, **kwargs)
        self.calls.append(list(values))
        return values


def rollouts_in_global_order(gathered: torch.Tensor, processes: int) -> torch.Tensor:
    """Each process's rollouts (processes·rollouts x completions x functions, as a gather stacks them)
    as rollouts x all completions, each rollout's completions in process order: the order TRL forms
    groups in, so a group may span processes."""
    per_process = gathered.view(processes, -1, *gathered.shape[1:])
    rollouts = per_process.transpose(0, 1)
    return rollouts.reshape(rollouts.shape[0], -1, gathered.shape[-1])

"""One PPO update's metrics, under the names of TRL's PPOTrainer (renamed to the unified ones by
`llm_rl.algorithms.ppo.algorithm.METRIC_NAMES`), gathered over processes in few collectives: one
gather for the per-process means and sums, one for the per-sample scores."""

from __future__ import annotations

from typing import Any

import torch
from accelerate import Accelerator

from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.rollout import Rollout
from llm_rl.algorithms.trl_groups.group_spread import group_spreads
from llm_rl.models.completions import ends_with_stop
from llm_rl.rewards.scoring import RewardAdapter, reward_metrics


@torch.no_grad()
def update_metrics(
    rollout: Rollout,
    stats: dict[str, torch.Tensor],
    *,
    accelerator: Accelerator,
    rewards: RewardAdapter,
    stop_token_ids: list[int],
    group_size: int,
) -> dict[str, Any]:
    """The rollout's and the optimisation's statistics (`stats`), averaged or summed over processes."""
    response_mask = rollout.response_mask
    ended = ends_with_stop(rollout.completion_ids, rollout.lengths, stop_token_ids)
    averaged = {
        "objective/kl": rollout.kl.sum(1).mean(),
        "objective/entropy": (-rollout.logprobs * response_mask).sum(1).mean(),
        "objective/non_score_reward": rollout.kl_penalty.sum(1).mean(),
        **critic_metrics(rollout),
        "completions/mean_length": (rollout.lengths + 1).float().mean(),
        "completions/clipped_ratio": (~ended).float().mean(),
        **stats,
    }
    skipped = rewards.take_skipped()
    summed = {
        "val/num_eos_tokens": ended.sum(),
        **{f"rewards/{name}/skipped": torch.tensor(float(count)) for name, count in skipped.items()},
    }
    local = torch.stack(
        [value.to(accelerator.device, torch.float32) for value in [*averaged.values(), *summed.values()]]
    )
    ranks = accelerator.gather(local[None]).reshape(-1, len(local))
    metrics: dict[str, Any] = {
        **dict(zip(averaged, ranks[:, : len(averaged)].mean(0).tolist(), strict=True)),
        **dict(zip(summed, ranks[:, len(averaged) :].sum(0).tolist(), strict=True)),
    }
    samples = accelerator.gather_for_metrics(torch.cat([rollout.scores[:, None], rollout.per_function], 1))
    scores = samples[:, 0]
    metrics["objective/scores"] = scores.mean().item()
    metrics["objective/scores_std"] = scores.std().item() if scores.numel() > 1 else 0.0
    metrics["objective/rlhf_reward"] = metrics["objective/non_score_reward"] + metrics["objective/scores"]
    metrics.update(group_metrics(scores, group_size))
    metrics.update(reward_metrics(samples[:, 1:], rewards.rewards.names))
    return metrics


def critic_metrics(rollout: Rollout) -> dict[str, torch.Tensor]:
    """How well the critic's values explain the returns; nothing without a critic."""
    if rollout.values is None:
        return {}
    variance = core.explained_variance(rollout.values, rollout.returns, rollout.value_mask)
    return {"val/explained_variance": variance}


def group_metrics(scores: torch.Tensor, group_size: int) -> dict[str, float]:
    """The mean spread of scores within a prompt's group, and the share of groups whose completions all
    scored alike (they carry no advantage under a group baseline), as GRPO logs them; none without groups.
    `scores` is the gathered batch: each process holds whole groups, so groups stay consecutive."""
    if group_size < 2:
        return {}
    spread = group_spreads(scores, group_size)
    return {
        "reward/group_std": spread.mean().item(),
        "frac_reward_zero_std": torch.isclose(spread, torch.zeros_like(spread)).float().mean().item(),
    }

"""PPO's maths as pure tensor functions: response masks, KL penalty, per-token rewards, GAE, whitening,
the clipped policy and value losses and a micro-batch's whole loss, explained variance.

The conventions are TRL's PPOTrainer's (trl <= 1.12), so that a recipe trains as it did there:

- a response's **length** is the index of its last token: the first stop token, or the last position when
  the length limit came first (`llm_rl.models.completions.response_lengths`);
- the **policy** learns on positions `0..length`; the **critic** on `0..length + 1`, and the sequence's
  score is added to the reward at `length + 1` (at `length` when that is past the end), so that the value
  of the position after the stop token learns the score (`response_masks`, `token_rewards`);
- the KL penalty is per token, `-kl_coef x KL`, added to every reward of the response.

Shapes: `[batch, response]` for per-token tensors, `[batch]` for per-sequence ones. Masks are boolean and
True where a position counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from llm_rl.models.completions import kept_positions

KlEstimator = Literal["k1", "k3"]


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The mean of `values` where `mask` is True (over `dim`, or over everything)."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum()
    return (values * mask).sum(dim) / mask.sum(dim)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """The variance of `values` where `mask` is True; `unbiased` applies Bessel's correction."""
    centred = values - masked_mean(values, mask)
    variance = masked_mean(centred**2, mask)
    if unbiased:
        count = mask.sum()
        if count < 2:
            raise ValueError("an unbiased variance needs at least 2 valid positions")
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values - mean) / std over the masked positions; with `shift_mean=False` the mean is kept."""
    mean, variance = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(variance + 1e-8)
    return whitened if shift_mean else whitened + mean


def response_masks(lengths: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(policy mask, value mask): positions `0..length` and `0..length + 1` of each response."""
    return kept_positions(lengths, width), kept_positions(lengths + 1, width)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KlEstimator) -> torch.Tensor:
    """Per-token KL(policy || reference) from the sampled tokens' log-probabilities.

    k1 = log p - log q (unbiased, high variance); k3 = (q/p - 1) - log(q/p) (unbiased, never negative).
    """
    log_ratio = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_ratio
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}: use 'k1' or 'k3'")


def token_rewards(
    scores: torch.Tensor, kl: torch.Tensor, lengths: torch.Tensor, kl_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, KL penalty): `-kl_coef x kl` at every token, plus each score at `length + 1` (or at
    `length` when that is the last position)."""
    penalty = -kl_coef * kl
    rewards = penalty.clone()
    width = rewards.shape[1]
    ends = torch.where(lengths + 1 < width, lengths + 1, lengths)
    rewards[torch.arange(rewards.shape[0], device=rewards.device), ends] += scores
    return rewards, penalty


def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation: (advantages, returns), the value after the last position 0.

    delta_t = r_t + gamma V_{t+1} - V_t;  A_t = delta_t + gamma lam A_{t+1};  returns = A + V.
    """
    width = rewards.shape[1]
    advantage = torch.zeros_like(rewards[:, 0])
    reversed_advantages = []
    for t in reversed(range(width)):
        next_value = values[:, t + 1] if t + 1 < width else 0.0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * advantage
        reversed_advantages.append(advantage)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    return advantages, advantages + values


@dataclass
class PolicyLoss:
    """The clipped surrogate loss and what it says about the update."""

    loss: torch.Tensor
    # Share of tokens whose ratio was clipped.
    clipfrac: torch.Tensor
    # 0.5 x mean squared log-ratio: how far the policy has moved from the rollout's.
    approxkl: torch.Tensor
    ratio: torch.Tensor


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
) -> PolicyLoss:
    """PPO's clipped surrogate: mean over tokens of max(-A r, -A clip(r, 1 - eps, 1 + eps))."""
    log_ratio = (logprobs - old_logprobs).masked_fill(~mask, 0.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), mask)
        approxkl = 0.5 * masked_mean(log_ratio**2, mask)
        mean_ratio = masked_mean(ratio, mask)
    return PolicyLoss(masked_mean(torch.max(unclipped, clipped), mask), clipfrac, approxkl, mean_ratio)


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, clipfrac): 0.5 x mean of max((V - R)^2, (clip(V, V_old +- eps) - R)^2) over the valid tokens."""
    values = values.masked_fill(~mask, 0.0)
    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    unclipped_loss = torch.square(values - returns)
    clipped_loss = torch.square(clipped - returns)
    with torch.no_grad():
        clipfrac = masked_mean((clipped_loss > unclipped_loss).float(), mask)
    return 0.5 * masked_mean(torch.max(unclipped_loss, clipped_loss), mask), clipfrac


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) over the valid tokens: 1 is a perfect critic, 0 a constant
    one; NaN when the returns do not vary."""
    variance = masked_var(returns, mask, unbiased=False)
    if variance <= 0:
        return torch.tensor(float("nan"), device=values.device)
    return 1 - masked_var(returns - values, mask, unbiased=False) / variance


@dataclass(frozen=True)
class ValueTerms:
    """The critic's side of a micro-batch's loss: its new values, the rollout's values and returns."""

    values: torch.Tensor
    old_values: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor
    cliprange_value: float
    vf_coef: float


def micro_batch_loss(
    logprobs: torch.Tensor,
    entropy: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
    entropy_coef: float = 0.0,
    value: ValueTerms | None = None,
    policy_weight: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`policy_weight` x (the clipped policy loss - `entropy_coef` x the mean entropy) + `vf_coef` x the
    clipped value loss (with a critic), and its statistics under TRL's PPO names. A `policy_weight` of 0
    (the critic's warm-up) keeps every policy parameter in the graph with a zero gradient."""
    policy = clipped_policy_loss(logprobs, old_logprobs, advantages, mask, cliprange)
    mean_entropy = masked_mean(entropy, mask)
    policy_loss = policy.loss - entropy_coef * mean_entropy if entropy_coef > 0 else policy.loss
    stats = {
        "loss/policy_avg": policy.loss.detach(),
        "policy/clipfrac_avg": policy.clipfrac,
        "policy/approxkl_avg": policy.approxkl,
        "policy/entropy_avg": mean_entropy.detach(),
        "val/ratio": policy.ratio,
    }
    if value is None:
        return policy_weight * policy_loss, stats
    value_loss, value_clipfrac = clipped_value_loss(
        value.values, value.old_values, value.returns, value.mask, value.cliprange_value
    )
    stats.update({"loss/value_avg": value_loss.detach(), "val/clipfrac_avg": value_clipfrac})
    return policy_weight * policy_loss + value.vf_coef * value_loss, stats

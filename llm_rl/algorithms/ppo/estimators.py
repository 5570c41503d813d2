"""Advantage estimators for llm_rl's own loop, as registered pure functions: GAE with a critic, and the
critic-free REINFORCE++, REINFORCE++-baseline, group-standardised (GRPO's) and leave-one-out (RLOO's).

Each takes one `AdvantageInputs` and returns (advantages, returns), [batch, response] each, zero past each
response. The critic-free ones share one pipeline, in the order OpenRLHF's experience maker uses
(openrlhf/trainer/ppo_utils/experience_maker.py, `compute_advantages_and_returns`):

1. the sequence's score is shaped within its group: kept (REINFORCE++), less the group's mean
   (REINFORCE++-baseline), standardised in the group (group), less the mean of the others (leave-one-out);
2. the shaped score goes on the response's last token, and the KL penalty `-kl_coef x KL` on every token
   (the KL in the reward, as in REINFORCE++: `A_t = r - beta sum_{i>=t} KL_i`);
3. returns are the discounted sums from each token to the end of its response;
4. REINFORCE++ and REINFORCE++-baseline whiten the returns over every token of the whole batch, across
   processes. Hu et al., "REINFORCE++" (arXiv:2501.03262), show that global normalisation removes the
   bias of normalising per prompt. The group estimators are centred by their baseline already and are
   not whitened (nor are they in OpenRLHF or verl's `core_algos.py`).

Groups are consecutive rows: `group_size` completions of one prompt. Global statistics cross processes
through `all_reduce` (a sum over processes; the identity on one), so the functions stay pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from llm_rl.algorithms.ppo import core

# TRL's GRPOTrainer divides by the group's standard deviation + 1e-4: the same here, so that `group` on
# this loop and `algorithm: grpo` standardise alike.
GROUP_STD_EPSILON = 1e-4


def no_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """`all_reduce` on one process."""
    return tensor


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read from one process's rollout. Per-token tensors are [batch, response]."""

    # Each sequence's score.
    scores: torch.Tensor
    # Per-token KL(policy || reference) of the sampled tokens, 0 past each response.
    kl: torch.Tensor
    # Each response's last position.
    lengths: torch.Tensor
    kl_coef: float
    gamma: float
    lam: float = 1.0
    # The critic's values, 0 past its positions (GAE only).
    values: torch.Tensor | None = None
    # Completions per prompt, in consecutive rows (the group estimators).
    group_size: int = 1
    # GAE's `whiten_rewards` (TRL's PPOConfig key); the estimator's own scaling of its advantages
    # (advantages.normalize: auto or batch; off with none): whitening, or the group's spread.
    whiten_rewards: bool = False
    whiten_advantages: bool = True
    # A sum over processes, for statistics of the global batch.
    all_reduce: Callable[[torch.Tensor], torch.Tensor] = no_reduce

    @property
    def mask(self) -> torch.Tensor:
        """Positions the policy learns on."""
        return core.response_masks(self.lengths, self.kl.shape[1])[0]


Estimate = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator and what a run needs for it."""

    name: str
    estimate: Callable[[AdvantageInputs], Estimate]
    # A critic (value model) is trained beside the policy.
    needs_critic: bool
    # Several completions of each prompt are sampled (`group_size` > 1).
    needs_groups: bool
    # The definition followed.
    reference: str
    # What `advantages.normalize: auto` means for it: "batch" (whitening), "group" (the group's spread) or
    # "none"; `none` turns that off, and no other value applies.
    auto_normalization: str = "batch"


# --------------------------------------------------------------------------------------------------
# The steps the estimators are made of
# --------------------------------------------------------------------------------------------------


def grouped(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """[groups, group_size] view of per-sequence scores; groups of one have no baseline."""
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError(f"{scores.shape[0]} scores do not split into groups of {group_size} (2 or more)")
    return scores.view(-1, group_size)


def less_group_mean(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each score less its group's mean (REINFORCE++-baseline's and Dr. GRPO's baseline)."""
    groups = grouped(scores, group_size)
    return (groups - groups.mean(dim=1, keepdim=True)).view(-1)


def group_standardised(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """(score - group mean) / (group's unbiased standard deviation + 1e-4): GRPO's advantage."""
    groups = grouped(scores, group_size)
    std = groups.std(dim=1, keepdim=True)
    return ((groups - groups.mean(dim=1, keepdim=True)) / (std + GROUP_STD_EPSILON)).view(-1)


def less_mean_of_others(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each score less the mean of the other scores of its group: RLOO's leave-one-out baseline."""
    groups = grouped(scores, group_size)
    others = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - others).view(-1)


def outcome_rewards(scores: torch.Tensor, kl_penalty: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-token rewards: the KL penalty at every response token, each score added at its last token."""
    mask = core.response_masks(lengths, kl_penalty.shape[1])[0]
    rewards = kl_penalty.masked_fill(~mask, 0.0)
    rewards[torch.arange(rewards.shape[0], device=rewards.device), lengths] += scores
    return rewards


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma G_{t+1} within each response, 0 past it."""
    rewards = rewards.masked_fill(~mask, 0.0)
    running = torch.zeros_like(rewards[:, 0])
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
    return returns.masked_fill(~mask, 0.0)


def global_whiten(
    values: torch.Tensor, mask: torch.Tensor, all_reduce: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """(values - mean) / std over the masked positions of every process (unbiased variance, as
    `core.masked_whiten`, which this equals on one process); 0 past each response. The sums are taken in
    float64 (a token count is inexact in bf16); a batch of one token is only centred."""
    weights = mask.to(torch.float64)
    wide = values.to(torch.float64)
    count, total = all_reduce(torch.stack([weights.sum(), (wide * weights).sum()]))
    mean = total / count.clamp(min=1)
    squares = all_reduce(((wide - mean) ** 2 * weights).sum())
    variance = squares / (count - 1) if count > 1 else torch.ones_like(squares)
    whitened = (wide - mean) * torch.rsqrt(variance + 1e-8)
    return whitened.to(values.dtype).masked_fill(~mask, 0.0)


# --------------------------------------------------------------------------------------------------
# The estimators
# --------------------------------------------------------------------------------------------------


def gae_estimate(inputs: AdvantageInputs) -> Estimate:
    """GAE on the critic's values, with TRL's PPOTrainer conventions (`core`): the score one position
    after the response, whitening per process."""
    if inputs.values is None:
        raise ValueError("GAE needs the critic's values")
    mask, value_mask = core.response_masks(inputs.lengths, inputs.kl.shape[1])
    rewards, _ = core.token_rewards(inputs.scores, inputs.kl, inputs.lengths, inputs.kl_coef)
    if inputs.whiten_rewards:
        rewards = core.masked_whiten(rewards, value_mask, shift_mean=False).masked_fill(~value_mask, 0.0)
    advantages, returns = core.gae(rewards, inputs.values, inputs.gamma, inputs.lam)
    if inputs.whiten_advantages:
        advantages = core.masked_whiten(advantages, mask)
    return advantages.masked_fill(~mask, 0.0), returns


def critic_free(inputs: AdvantageInputs, shaped_scores: torch.Tensor, gamma: float, whiten: bool) -> Estimate:
    """Steps 2-4 of the module's pipeline for scores already shaped by their group."""
    mask = inputs.mask
    rewards = outcome_rewards(shaped_scores, -inputs.kl_coef * inputs.kl, inputs.lengths)
    returns = discounted_returns(rewards, mask, gamma)
    advantages = global_whiten(returns, mask, inputs.all_reduce) if whiten else returns
    return advantages, returns


def reinforce_pp(inputs: AdvantageInputs) -> Estimate:
    """REINFORCE++: the KL-shaped discounted return, whitened over the global batch (unless
    `whiten_advantages` is off: advantages.normalize: none)."""
    return critic_free(inputs, inputs.scores, inputs.gamma, whiten=inputs.whiten_advantages)


def reinforce_pp_baseline(inputs: AdvantageInputs) -> Estimate:
    """REINFORCE++-baseline: the score less its group's mean, then as REINFORCE++ (undiscounted)."""
    shaped = less_group_mean(inputs.scores, inputs.group_size)
    return critic_free(inputs, shaped, 1.0, whiten=inputs.whiten_advantages)


def group_estimate(inputs: AdvantageInputs) -> Estimate:
    """GRPO's advantage on this loop: the score standardised in its group, with the KL in the reward.
    Without `whiten_advantages` (advantages.normalize: none) the score is only centred: Dr. GRPO's
    choice (arXiv:2503.20783), as `algorithm: grpo` does with the same setting."""
    if inputs.whiten_advantages:
        shaped = group_standardised(inputs.scores, inputs.group_size)
    else:
        shaped = less_group_mean(inputs.scores, inputs.group_size)
    return critic_free(inputs, shaped, 1.0, whiten=False)


def leave_one_out(inputs: AdvantageInputs) -> Estimate:
    """RLOO's advantage on this loop: the score less the mean of its group's others, KL in the reward."""
    return critic_free(inputs, less_mean_of_others(inputs.scores, inputs.group_size), 1.0, whiten=False)


OPENRLHF = "OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py"
ESTIMATORS: dict[str, Estimator] = {
    estimator.name: estimator
    for estimator in (
        Estimator("gae", gae_estimate, True, False, "Schulman et al. 2016 (arXiv:1506.02438); TRL <= 1.12"),
        Estimator("reinforce_pp", reinforce_pp, False, False, f"arXiv:2501.03262; {OPENRLHF} 'reinforce'"),
        Estimator(
            "reinforce_pp_baseline",
            reinforce_pp_baseline,
            False,
            True,
            f"arXiv:2501.03262; {OPENRLHF} 'reinforce_baseline'",
        ),
        Estimator(
            "group", group_estimate, False, True, f"arXiv:2402.03300 (GRPO); {OPENRLHF} 'group_norm'", "group"
        ),
        Estimator(
            "leave_one_out", leave_one_out, False, True, f"arXiv:2402.14740 (RLOO); {OPENRLHF} 'rloo'", "none"
        ),
    )
}
# The spellings of TRL, OpenRLHF and verl for the same estimators.
SYNONYMS = {
    "reinforce": "reinforce_pp",
    "reinforce++": "reinforce_pp",
    "reinforce_plus_plus": "reinforce_pp",
    "reinforce_baseline": "reinforce_pp_baseline",
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
    "grpo": "group",
    "group_norm": "group",
    "rloo": "leave_one_out",
}


def find_estimator(name: str) -> Estimator:
    """The estimator a name or synonym stands for (ValueError listing the names, when none)."""
    key = SYNONYMS.get(name.lower(), name.lower())
    if key not in ESTIMATORS:
        known = ", ".join([*ESTIMATORS, *SYNONYMS])
        raise ValueError(f"unknown advantage estimator {name!r}; known: {known}")
    return ESTIMATORS[key]

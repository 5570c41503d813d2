"""One PPO batch on one process (`Rollout`), and the step that turns its scores into advantages.

The trainer fills a `Rollout` with what the policy generated and how it scored, then
`estimate_advantages` adds the KL penalty, the advantages and the returns (the maths of
`llm_rl.algorithms.ppo.core`, through the estimator registry of `llm_rl.algorithms.ppo.estimators`). Kept apart from the trainer so that a recorded rollout can be
replayed through the same code (tests/algorithms/test_ppo_parity.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.estimators import AdvantageInputs, find_estimator, no_reduce
from llm_rl.models.completions import ends_with_stop


@dataclass
class AdvantageSettings:
    """The `ppo:` keys that shape advantages (see `llm_rl.algorithms.ppo.settings.PPOSettings`)."""

    kl_coef: float
    kl_estimator: core.KlEstimator
    gamma: float
    lam: float
    whiten_rewards: bool
    # Whiten GAE's advantages over the batch, or REINFORCE++'s over the global batch, or divide the group
    # estimator's by the group's spread (advantages.normalize: auto; batch for GAE).
    whiten_advantages: bool
    # The registered estimator (`ppo.advantage_estimator`) and the completions per prompt of its groups.
    estimator: str = "gae"
    group_size: int = 1
    # A sum over processes, for the statistics of the global batch (REINFORCE++'s whitening).
    all_reduce: Callable[[torch.Tensor], torch.Tensor] = field(default=no_reduce, repr=False)


@dataclass
class Rollout:
    """Prompts, completions and their PPO quantities; per-token tensors are [batch, response width]."""

    # Left-padded prompt token ids and their attention mask.
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    # Generated token ids; positions after each response's stop token are padding.
    completion_ids: torch.Tensor
    # Each response's last position (`llm_rl.models.completions.response_lengths`).
    lengths: torch.Tensor
    # The dataset row of each prompt (for the reward functions' columns).
    row_indices: torch.Tensor
    # Log-probabilities of the generated tokens under the policy and the reference model.
    logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    # The critic's value before each response token; None without a critic.
    values: torch.Tensor | None
    # Each sequence's score (weighted reward sum, penalties applied) and each reward's own value
    # ([batch, reward functions], NaN where a function did not apply).
    scores: torch.Tensor
    per_function: torch.Tensor
    # Added by `estimate_advantages`.
    kl: torch.Tensor | None = None
    kl_penalty: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def width(self) -> int:
        """Response positions of the batch (its longest response)."""
        return self.completion_ids.shape[1]

    @property
    def response_mask(self) -> torch.Tensor:
        """Positions the policy learns on: each response up to its last token."""
        return core.response_masks(self.lengths, self.width)[0]

    @property
    def value_mask(self) -> torch.Tensor:
        """Positions the critic learns on: one more than the policy's."""
        return core.response_masks(self.lengths, self.width)[1]

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, attention mask) of prompt and response together (`join_sequences`)."""
        return join_sequences(self.prompt_ids, self.prompt_mask, self.completion_ids, self.lengths)

    def select(self, index: torch.Tensor) -> Rollout:
        """The rows in `index`, as a rollout of their own (a mini- or micro-batch)."""
        picked = {
            field.name: value[index]
            if isinstance(value := getattr(self, field.name), torch.Tensor)
            else value
            for field in dataclasses.fields(self)
        }
        return Rollout(**picked)


def join_sequences(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, attention mask) of prompts and responses side by side; nothing after a response's last
    token is attended."""
    response_mask, _ = core.response_masks(lengths, completion_ids.shape[1])
    return torch.cat([prompt_ids, completion_ids], dim=1), torch.cat(
        [prompt_mask.bool(), response_mask], dim=1
    )


def penalise_missing_stop(
    scores: torch.Tensor,
    completion_ids: torch.Tensor,
    lengths: torch.Tensor,
    stop_token_ids: list[int],
    penalty: float | None,
) -> torch.Tensor:
    """Scores less `penalty` for responses that hit the length limit before a stop token (TRL's
    `missing_eos_penalty`)."""
    if penalty is None or not stop_token_ids:
        return scores
    ended = ends_with_stop(completion_ids, lengths, stop_token_ids)
    return torch.where(ended, scores, scores - penalty)


def estimate_advantages(rollout: Rollout, settings: AdvantageSettings) -> Rollout:
    """The rollout with its KL, KL penalty, advantages and returns, by the estimator `settings` names;
    log-probs past each response and values past the critic's positions are zeroed, as every later step
    expects."""
    response_mask, value_mask = rollout.response_mask, rollout.value_mask
    logprobs = rollout.logprobs.masked_fill(~response_mask, 0.0)
    ref_logprobs = rollout.ref_logprobs.masked_fill(~response_mask, 0.0)
    values = None if rollout.values is None else rollout.values.masked_fill(~value_mask, 0.0)
    kl = core.kl_estimate(logprobs, ref_logprobs, settings.kl_estimator)
    inputs = AdvantageInputs(
        scores=rollout.scores,
        kl=kl,
        lengths=rollout.lengths,
        kl_coef=settings.kl_coef,
        gamma=settings.gamma,
        lam=settings.lam,
        values=values,
        group_size=settings.group_size,
        whiten_rewards=settings.whiten_rewards,
        whiten_advantages=settings.whiten_advantages,
        all_reduce=settings.all_reduce,
    )
    advantages, returns = find_estimator(settings.estimator).estimate(inputs)
    return dataclasses.replace(
        rollout,
        logprobs=logprobs,
        ref_logprobs=ref_logprobs,
        values=values,
        kl=kl,
        kl_penalty=-settings.kl_coef * kl,
        advantages=advantages,
        returns=returns,
    )

"""Steps 1-4 of a PPO update: a batch of prompts into a `Rollout` with advantages.

`RolloutMaker.make` repeats each prompt `ppo.num_generations` times in consecutive rows, generates,
scores with the recipe's reward functions, evaluates the response tokens under the policy, the
reference model and the critic (no grad, response positions only), and estimates advantages with the
registered estimator. It reads the trainer's settings and sampling objects, so a scheduled setting
changed between updates reaches the next rollout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from accelerate import Accelerator

from llm_rl.algorithms.ppo.forward import PolicyAndCritic, chunked_logprobs, chunked_values
from llm_rl.algorithms.ppo.rollout import (
    AdvantageSettings,
    Rollout,
    estimate_advantages,
    join_sequences,
    penalise_missing_stop,
)
from llm_rl.algorithms.ppo.settings import PPOSettings
from llm_rl.data.prompts import ROW_INDEX
from llm_rl.generation.sampling import Generator, SamplingSettings, left_padded
from llm_rl.models.completions import response_lengths, trimmed
from llm_rl.rewards.scoring import RewardAdapter


class RolloutMaker:
    """Turns prompt batches into rollouts (module docstring)."""

    def __init__(
        self,
        *,
        models: PolicyAndCritic,
        reference: torch.nn.Module | None,
        generator: Generator,
        rewards: RewardAdapter,
        settings: PPOSettings,
        sampling: SamplingSettings,
        accelerator: Accelerator,
        forward_chunk_size: int,
        whiten_advantages: bool,
    ) -> None:
        """`models` is the unwrapped policy and critic; `reference` None means the policy with its LoRA
        adapter off; `forward_chunk_size` sequences go through each no-grad forward pass."""
        self.models = models
        self.reference = reference
        self.generator = generator
        self.rewards = rewards
        self.settings = settings
        self.sampling = sampling
        self.accelerator = accelerator
        self.forward_chunk_size = forward_chunk_size
        self.whiten_advantages = whiten_advantages

    @property
    def stop_token_ids(self) -> list[int]:
        return self.sampling.stop_token_ids

    @torch.no_grad()
    def make(self, batch: dict[str, torch.Tensor]) -> Rollout:
        """Generate for one prompt batch (each prompt `group_size` times), score, evaluate and estimate
        advantages."""
        device = self.accelerator.device
        batch = {
            key: value.repeat_interleave(self.settings.group_size, dim=0) for key, value in batch.items()
        }
        prompt_ids = batch["input_ids"].to(device)
        prompt_mask = batch["attention_mask"].to(device).bool()
        with self.accelerator.autocast():
            completion_ids = self.generator.generate(prompt_ids, prompt_mask).completion_ids
        lengths = response_lengths(completion_ids, self.stop_token_ids)
        scores, per_function = self.score(batch[ROW_INDEX], completion_ids)
        scores = penalise_missing_stop(
            scores, completion_ids, lengths, self.stop_token_ids, self.settings.missing_eos_penalty
        )
        ids, attention = join_sequences(prompt_ids, prompt_mask, completion_ids, lengths)
        logprobs, ref_logprobs, values = self.evaluate_responses(ids, attention, completion_ids.shape[1])
        rollout = Rollout(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            lengths=lengths,
            row_indices=batch[ROW_INDEX].to(device),
            logprobs=logprobs,
            ref_logprobs=ref_logprobs,
            values=values,
            scores=scores,
            per_function=per_function,
        )
        return estimate_advantages(rollout, self.advantage_settings())

    def score(
        self, row_indices: torch.Tensor, completion_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, per-function values) of each completion, its tokens up to and with its stop token."""
        scores, values = self.rewards(row_indices.tolist(), trimmed(completion_ids, self.stop_token_ids))
        return scores.to(completion_ids.device), values.to(completion_ids.device)

    def evaluate_responses(
        self, ids: torch.Tensor, attention: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Log-probs of the last `width` tokens under the policy and the reference, and the critic's values
        (None without a critic)."""
        common = {
            "width": width,
            "pad_token_id": self.sampling.pad_token_id,
            "chunk_size": self.forward_chunk_size,
        }
        temperature = self.sampling.temperature
        critic = self.models.critic
        with self.accelerator.autocast():
            logprobs = chunked_logprobs(self.models.policy, ids, attention, temperature=temperature, **common)
            with self.reference_model() as reference:
                ref_logprobs = chunked_logprobs(reference, ids, attention, temperature=temperature, **common)
            values = None if critic is None else chunked_values(critic, ids, attention, **common).float()
        return logprobs.float(), ref_logprobs.float(), values

    @contextmanager
    def reference_model(self) -> Iterator[torch.nn.Module]:
        """The reference model; with LoRA, the policy with its adapter off (no second copy)."""
        if self.reference is not None:
            yield self.reference
        else:
            with self.models.policy.disable_adapter():
                yield self.models.policy

    def advantage_settings(self) -> AdvantageSettings:
        """The settings in force for this update's advantages."""
        settings = self.settings
        return AdvantageSettings(
            kl_coef=settings.kl_coef,
            kl_estimator=settings.kl_estimator,
            gamma=settings.gamma,
            lam=settings.lam,
            whiten_rewards=settings.whiten_rewards,
            whiten_advantages=self.whiten_advantages,
            estimator=settings.advantage_estimator,
            group_size=settings.group_size,
            all_reduce=lambda tensor: self.accelerator.reduce(tensor, reduction="sum"),
        )


class PromptCollator:
    """Tokenized prompts into a batch: left-padded ids and mask (as every generator takes them), and the
    rows' indices (the way back to their dataset columns for the reward functions)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids, mask = left_padded([row["input_ids"] for row in rows], self.pad_token_id)
        return {
            "input_ids": ids,
            "attention_mask": mask,
            ROW_INDEX: torch.tensor([row[ROW_INDEX] for row in rows]),
        }

"""Generation for PPO rollouts, behind one small interface.

A `Generator` takes a batch of left-padded prompts and returns the completions' token ids, each cut
after its first stop token. The trainer computes the log-probabilities it trains on itself, with the
same forward pass as the update, so that PPO's ratio compares like with like whatever generated the
tokens; an engine that reports its own sampling log-probs may return them too.

`HFGenerator` is transformers' `generate` on the training policy. A faster engine implements the same
two methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from accelerate import Accelerator
from transformers import GenerationConfig
from trl.models.utils import unwrap_model_for_generation

from llm_rl.models.completions import cut_after_stop


@dataclass
class Completions:
    """A generator's answer for a batch of prompts."""

    # [batch, width]: each row's tokens up to its stop token (or the length limit), then padding.
    completion_ids: torch.Tensor
    # [batch, width]: the engine's own log-probabilities of those tokens, where it reports them.
    sampler_logprobs: torch.Tensor | None = None


class Generator(Protocol):
    """What the PPO trainer needs from a generation engine."""

    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        """Completions for left-padded prompts ([batch, prompt width] ids and attention mask)."""
        ...

    def weights_updated(self) -> None:
        """Called after every optimizer update: an engine holding its own copy of the weights refreshes it."""
        ...


@dataclass
class SamplingSettings:
    """How completions are sampled: the recipe's generation section and its stop tokens."""

    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    min_new_tokens: int | None = None
    # Token ids that end a completion; empty: only the length limit does.
    stop_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int = 0

    def generation_config(self) -> GenerationConfig:
        """transformers' sampling configuration for these settings."""
        extra: dict[str, Any] = {}
        if self.min_new_tokens is not None:
            extra["min_new_tokens"] = self.min_new_tokens
        return GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=True,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            eos_token_id=self.stop_token_ids or None,
            pad_token_id=self.pad_token_id,
            **extra,
        )


@contextmanager
def sampling_only(policy: torch.nn.Module, config: GenerationConfig) -> Iterator[None]:
    """While generating, `config` stands in for the model's own generation config.

    transformers fills every setting the call leaves unset from the model's config: a checkpoint's
    `repetition_penalty` or `no_repeat_ngram_size` would then reshape the sampling distribution while
    PPO's log-probs assume plain softmax(logits / temperature), and its EOS would end completions when
    `ppo.stop_token` is null.
    """
    model = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    saved = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = saved


class HFGenerator:
    """transformers' `generate` on the policy being trained, `chunk_size` prompts a call.

    Under DeepSpeed ZeRO-3 the shards of the engine's models (the policy and the critic, which train as
    one engine) are gathered for generation when `gather_zero3` is on (fast, needs both to fit on one
    device), and generated shard by shard otherwise.
    `policy_of` picks the policy out of the model the trainer prepared (the policy-and-critic wrapper).
    """

    def __init__(
        self,
        model: Callable[[], torch.nn.Module],
        accelerator: Accelerator,
        sampling: SamplingSettings,
        chunk_size: int,
        gather_zero3: bool = True,
        policy_of: Callable[[torch.nn.Module], torch.nn.Module] = lambda wrapper: wrapper.policy,
    ) -> None:
        self.model = model
        self.accelerator = accelerator
        self.sampling = sampling
        self.chunk_size = chunk_size
        self.gather_zero3 = gather_zero3
        self.policy_of = policy_of

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        config = self.sampling.generation_config()
        width = prompt_ids.shape[1]
        chunks = []
        with unwrap_model_for_generation(
            self.model(), self.accelerator, gather_deepspeed3_params=self.gather_zero3
        ) as unwrapped:
            policy = self.policy_of(unwrapped)
            with sampling_only(policy, config):
                for start in range(0, prompt_ids.shape[0], self.chunk_size):
                    sequences = policy.generate(
                        input_ids=prompt_ids[start : start + self.chunk_size],
                        attention_mask=prompt_mask[start : start + self.chunk_size],
                        generation_config=config,
                    )
                    chunks.append(sequences[:, width:])
        longest = max(chunk.shape[1] for chunk in chunks)
        padded = torch.cat(
            [
                torch.nn.functional.pad(c, (0, longest - c.shape[1]), value=self.sampling.pad_token_id)
                for c in chunks
            ]
        )
        return Completions(cut_after_stop(padded, self.sampling.stop_token_ids, self.sampling.pad_token_id))

    def weights_updated(self) -> None:
        """Nothing to do: generation reads the training weights themselves."""

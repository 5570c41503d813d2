"""What is sampled, whatever generates it: `SamplingSettings`, the `Generator` interface, and the padding of
prompts and completions.

A `Generator` takes a batch of left-padded prompts and returns the completions' token ids, each cut
after its first stop token. A trainer computes the log-probabilities it trains on itself, with the
same forward pass as the update, so that PPO's ratio compares like with like whatever generated the
tokens; an engine that reports its own sampling log-probs may return them too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import GenerationConfig

from llm_rl.generation.backends import resolve_backend, with_backend
from llm_rl.models.completions import cut_after_stop
from llm_rl.schema import GenerationSection


@dataclass
class Completions:
    """A generator's answer for a batch of prompts."""

    # [batch, width]: each row's tokens up to its stop token (or the length limit), then padding.
    completion_ids: torch.Tensor
    # [batch, width]: the engine's own log-probabilities of those tokens, where it reports them.
    sampler_logprobs: torch.Tensor | None = None


class Generator(Protocol):
    """What a trainer needs from a generation engine."""

    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        """Completions for left-padded prompts ([batch, prompt width] ids and attention mask)."""
        ...

    def weights_updated(self) -> None:
        """Called after every optimizer update: an engine holding its own copy of the weights refreshes it
        before it generates again."""
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
    # The resolved `generation.backend` (hf, static, paged or vllm): how, never what, it samples.
    backend: str = "hf"
    # Greedy decoding (held-out evaluation) instead of sampling at `temperature`.
    greedy: bool = False

    def generation_config(self) -> GenerationConfig:
        """transformers' sampling configuration for these settings, with the backend's own fields."""
        extra: dict[str, Any] = {}
        if self.min_new_tokens is not None:
            extra["min_new_tokens"] = self.min_new_tokens
        sampling = (
            {"do_sample": False}
            if self.greedy
            else {
                "do_sample": True,
                "temperature": self.temperature,
                "top_p": self.top_p,
                "top_k": self.top_k,
            }
        )
        config = GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.stop_token_ids or None,
            pad_token_id=self.pad_token_id,
            **sampling,
            **extra,
        )
        return with_backend(config, self.backend)


def recipe_sampling(
    generation: GenerationSection,
    stop_token_ids: list[int],
    pad_token_id: int,
    greedy: bool = False,
    temperature: float | None = None,
) -> SamplingSettings:
    """The sampling settings a recipe's generation section gives, for every part that generates: training
    rollouts, held-out evaluation (`greedy`) and `llm-rl sample`. `temperature` replaces the section's (a
    schedule's value at the start)."""
    return SamplingSettings(
        max_new_tokens=generation.max_new_tokens,
        temperature=generation.temperature if temperature is None else temperature,
        top_p=generation.top_p,
        top_k=generation.top_k or 0,
        min_new_tokens=generation.min_new_tokens,
        stop_token_ids=list(stop_token_ids),
        pad_token_id=pad_token_id,
        backend=resolve_backend(generation.backend),
        greedy=greedy,
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


def left_padded(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[batch, longest] prompt ids padded on the left, and their attention mask (1 on tokens): how every
    generator takes a batch of prompts, so that each completion starts in the same column."""
    width = max(len(ids) for ids in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.as_tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
    return ids, mask


def unpadded_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """Each prompt's own token ids, without its padding (what engines that schedule requests take)."""
    return [ids[mask].tolist() for ids, mask in zip(prompt_ids, prompt_mask.bool(), strict=True)]


def padded_completions(rows: list[torch.Tensor], sampling: SamplingSettings) -> torch.Tensor:
    """[batch, longest] completion ids from rows or blocks of rows of any width, padded on the right and cut
    after each row's first stop token."""
    blocks = [row if row.dim() == 2 else row[None] for row in rows]
    longest = max(block.shape[1] for block in blocks)
    padded = torch.cat(
        [
            torch.nn.functional.pad(block, (0, longest - block.shape[1]), value=sampling.pad_token_id)
            for block in blocks
        ]
    )
    return cut_after_stop(padded, sampling.stop_token_ids, sampling.pad_token_id)

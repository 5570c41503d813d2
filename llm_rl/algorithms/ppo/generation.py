"""Generation for PPO rollouts, behind one small interface.

A `Generator` takes a batch of left-padded prompts and returns the completions' token ids, each cut
after its first stop token. The trainer computes the log-probabilities it trains on itself, with the
same forward pass as the update, so that PPO's ratio compares like with like whatever generated the
tokens; an engine that reports its own sampling log-probs may return them too.

`HFGenerator` is transformers' `generate` on the training policy, with a dynamic cache (`hf`) or a
static cache and compiled generation (`static`); `PagedGenerator` is transformers' continuous
batching (`paged`); `build_generator` picks one by `generation.backend`. A faster engine implements
the same two methods.
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
from llm_rl.models.generation_backends import with_backend


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
    # The resolved `generation.backend` (hf, static or paged): how, never what, it samples.
    backend: str = "hf"

    def generation_config(self) -> GenerationConfig:
        """transformers' sampling configuration for these settings, with the backend's own fields."""
        extra: dict[str, Any] = {}
        if self.min_new_tokens is not None:
            extra["min_new_tokens"] = self.min_new_tokens
        config = GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=True,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            eos_token_id=self.stop_token_ids or None,
            pad_token_id=self.pad_token_id,
            **extra,
        )
        return with_backend(config, self.backend)


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

    @contextmanager
    def generating_policy(self, config: GenerationConfig) -> Iterator[torch.nn.Module]:
        """The policy, unwrapped for generation (gathered under ZeRO-3), with `config` standing in for its own."""
        with unwrap_model_for_generation(
            self.model(), self.accelerator, gather_deepspeed3_params=self.gather_zero3
        ) as unwrapped:
            policy = self.policy_of(unwrapped)
            with sampling_only(policy, config):
                yield policy

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        config = self.sampling.generation_config()
        width = prompt_ids.shape[1]
        chunks = []
        with self.generating_policy(config) as policy:
            for start in range(0, prompt_ids.shape[0], self.chunk_size):
                sequences = policy.generate(
                    input_ids=prompt_ids[start : start + self.chunk_size],
                    attention_mask=prompt_mask[start : start + self.chunk_size],
                    generation_config=config,
                )
                chunks.append(sequences[:, width:])
        return Completions(padded_completions(chunks, self.sampling))

    def weights_updated(self) -> None:
        """Nothing to do: generation reads the training weights themselves."""


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


class PagedGenerator(HFGenerator):
    """transformers' continuous batching (`generate_batch`) on the policy being trained: requests are
    scheduled token by token over a paged KV cache, so no prompt is padded and a finished completion frees
    its slot at once. `chunk_size` prompts are handed over a call."""

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        config = self.sampling.generation_config()
        prompts = [ids[mask].tolist() for ids, mask in zip(prompt_ids, prompt_mask.bool(), strict=True)]
        rows = []
        with self.generating_policy(config) as policy:
            for start in range(0, len(prompts), self.chunk_size):
                chunk = prompts[start : start + self.chunk_size]
                outputs = policy.generate_batch(chunk, generation_config=config, progress_bar=False)
                # Requests are numbered req_<n> in the order given; the answer comes in the order they ended.
                ordered = sorted(
                    outputs.values(), key=lambda output: int(output.request_id.rsplit("_", 1)[1])
                )
                rows += [torch.tensor(output.generated_tokens, dtype=torch.long) for output in ordered]
        return Completions(padded_completions(rows, self.sampling).to(prompt_ids.device))


def build_generator(
    model: Callable[[], torch.nn.Module],
    accelerator: Accelerator,
    sampling: SamplingSettings,
    chunk_size: int,
    gather_zero3: bool = True,
) -> Generator:
    """The generator for `sampling.backend`: continuous batching for `paged`, `generate` otherwise."""
    generator_class = PagedGenerator if sampling.backend == "paged" else HFGenerator
    return generator_class(model, accelerator, sampling, chunk_size, gather_zero3=gather_zero3)

"""transformers as the generation engine, on the policy being trained: `generate` with a dynamic cache
(`hf`) or a static cache and compiled generation (`static`), and continuous batching (`paged`).

Both read the training weights themselves, so an optimizer update needs no copying.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from accelerate import Accelerator
from transformers import GenerationConfig
from trl.models.utils import unwrap_model_for_generation

from llm_rl.generation.sampling import (
    Completions,
    SamplingSettings,
    padded_completions,
    sampling_only,
    unpadded_prompts,
)


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


# transformers' own default for the tokens one continuous-batching step may carry.
DEFAULT_MAX_BATCH_TOKENS = 8192


def paged_cache_config(requests: int, longest_prompt: int, max_new_tokens: int) -> Any:
    """Continuous batching sized to the rollout: a paged cache that holds `requests` sequences of the
    longest prompt plus `max_new_tokens` at once, and no more.

    Left to itself transformers sizes the cache to a share of the free memory, which on a CPU is most of
    the host's RAM (14 GiB for the tiny model on a 24 GiB machine): slow to allocate and fatal to anything
    else running. A smaller cache than the rollout needs is still correct (requests wait for free pages),
    only slower, so an estimate of the longest prompt is enough.
    """
    # transformers 5.8 and later (`continuous_batching_problem` checks before `paged` is chosen).
    from transformers.generation import ContinuousBatchingConfig

    config = ContinuousBatchingConfig()
    # `page_size` was `block_size` before transformers 5.17.
    page = getattr(config, "page_size", None) or config.block_size
    config.num_blocks = requests * math.ceil((longest_prompt + max_new_tokens) / page)
    config.max_requests_per_batch = requests
    # Every prompt's prefill in one step, and no more: the attention masks grow with this times the cache.
    config.max_batch_tokens = max(requests, min(DEFAULT_MAX_BATCH_TOKENS, requests * longest_prompt))
    return config


class PagedGenerator(HFGenerator):
    """transformers' continuous batching (`generate_batch`) on the policy being trained: requests are
    scheduled token by token over a paged KV cache, so no prompt is padded and a finished completion frees
    its slot at once. `chunk_size` prompts are handed over a call, with a cache sized to them."""

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        config = self.sampling.generation_config()
        prompts = unpadded_prompts(prompt_ids, prompt_mask)
        rows = []
        with self.generating_policy(config) as policy:
            for start in range(0, len(prompts), self.chunk_size):
                chunk = prompts[start : start + self.chunk_size]
                cache = paged_cache_config(len(chunk), max(map(len, chunk)), config.max_new_tokens)
                outputs = policy.generate_batch(
                    chunk, generation_config=config, continuous_batching_config=cache, progress_bar=False
                )
                # Requests are numbered req_<n> in the order given; the answer comes in the order they ended.
                ordered = sorted(
                    outputs.values(), key=lambda output: int(output.request_id.rsplit("_", 1)[1])
                )
                rows += [torch.tensor(output.generated_tokens, dtype=torch.long) for output in ordered]
        return Completions(padded_completions(rows, self.sampling).to(prompt_ids.device))

"""The generator a resolved `generation.backend` names, for a trainer generating with the policy it trains."""

from __future__ import annotations

from collections.abc import Callable

import torch
from accelerate import Accelerator

from llm_rl.generation.sampling import Generator, SamplingSettings
from llm_rl.generation.transformers_generators import HFGenerator, PagedGenerator
from llm_rl.generation.vllm_settings import VLLMInputs


def build_generator(
    model: Callable[[], torch.nn.Module],
    accelerator: Accelerator,
    sampling: SamplingSettings,
    chunk_size: int,
    gather_zero3: bool = True,
    policy_of: Callable[[torch.nn.Module], torch.nn.Module] = lambda wrapper: wrapper.policy,
    vllm: VLLMInputs | None = None,
) -> Generator:
    """The generator for `sampling.backend`: a vLLM engine for `vllm` (`vllm` says how to start it),
    continuous batching for `paged`, `generate` otherwise.

    `model` returns the model the trainer prepared, `policy_of` picks the policy out of it.
    """
    if sampling.backend == "vllm":
        if vllm is None:
            raise ValueError("the vllm backend needs its engine settings")
        from llm_rl.generation.vllm_engine.generators import VLLMGenerator

        return VLLMGenerator.start(
            vllm.policy, accelerator, vllm.tokenizer, sampling, vllm.engine, max_num_seqs=chunk_size
        )
    generator_class = PagedGenerator if sampling.backend == "paged" else HFGenerator
    return generator_class(
        model, accelerator, sampling, chunk_size, gather_zero3=gather_zero3, policy_of=policy_of
    )

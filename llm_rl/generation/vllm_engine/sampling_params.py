"""`SamplingSettings` as vLLM's sampling parameters, and TRL's vLLM generation made to sample with them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trl.generation.vllm_generation import VLLMGeneration

from llm_rl.generation.sampling import SamplingSettings


def vllm_sampling(sampling: SamplingSettings) -> dict[str, Any]:
    """`SamplingSettings` as vLLM's `SamplingParams` fields: the settings given and nothing else (no model
    generation config), stopping at the settings' stop tokens alone (with none, only the length limit)."""
    return {
        "temperature": 0.0 if sampling.greedy else sampling.temperature,
        "top_p": 1.0 if sampling.greedy else sampling.top_p,
        "top_k": 0 if sampling.greedy else sampling.top_k,
        "max_tokens": sampling.max_new_tokens,
        "stop_token_ids": list(sampling.stop_token_ids),
        "ignore_eos": True,
        "min_tokens": sampling.min_new_tokens or 0,
    }


# TRL's `VLLMGeneration` copies these vLLM fields into attributes of its own at start-up, and passes the
# rest through `generation_kwargs`.
TRL_SAMPLING_ATTRIBUTES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_completion_length",
}


@contextmanager
def sampling_as(rollouts: VLLMGeneration, sampling: SamplingSettings) -> Iterator[None]:
    """While generating, TRL's vLLM generation samples with `sampling`; its own settings come back after (a
    GRPO trainer's, when held-out evaluation borrows its engine)."""
    fields = vllm_sampling(sampling)
    values = {TRL_SAMPLING_ATTRIBUTES[name]: fields.pop(name) for name in TRL_SAMPLING_ATTRIBUTES}
    values |= {"min_p": 0.0, "repetition_penalty": 1.0, "generation_kwargs": fields}
    saved = {name: getattr(rollouts, name) for name in values}
    for name, value in values.items():
        setattr(rollouts, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(rollouts, name, value)

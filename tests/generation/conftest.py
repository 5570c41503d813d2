"""What the generation tests share: the vLLM overrides of a small run, and a tiny saved model of an
architecture vLLM does not implement."""

from __future__ import annotations

from pathlib import Path

import pytest

# One engine a process on a CPU: a small KV cache, so that test workers side by side fit in memory.
VLLM = ("generation.backend=vllm", "generation.vllm.kv_cache_gb=1")


def group_size(algorithm: str) -> tuple[str, ...]:
    """GRPO and RLOO: groups of 4 completions."""
    return () if algorithm == "ppo" else (f"{algorithm}.num_generations=4",)


@pytest.fixture(scope="session")
def unsupported_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-layer GPT-Neo (transformers has it, vLLM does not) with the embedded model's tokenizer."""
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    from llm_rl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = GPTNeoConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        attention_types=[[["global"], 2]],
        max_position_embeddings=64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("gpt_neo")
    GPTNeoForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

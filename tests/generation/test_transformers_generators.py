"""The paged (continuous-batching) cache is sized to the rollout, not to the host's memory."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from llm_rl.generation.transformers_generators import DEFAULT_MAX_BATCH_TOKENS, paged_cache_config
from llm_rl.models.tiny import build_tokenizer, tiny_model_path
from tests.conftest import REPO


def test_the_cache_holds_every_request_at_its_longest() -> None:
    config = paged_cache_config(requests=64, longest_prompt=10, max_new_tokens=5)
    page = config.page_size
    assert (config.num_blocks, config.max_requests_per_batch) == (64, 64)
    # A sequence longer than a page takes two of them, for every request.
    assert paged_cache_config(8, page, 1).num_blocks == 16
    # Every prompt's prefill in one step, up to transformers' own default.
    assert config.max_batch_tokens == 640
    assert paged_cache_config(1024, 2000, 10).max_batch_tokens == DEFAULT_MAX_BATCH_TOKENS
    assert paged_cache_config(16, 1, 4).max_batch_tokens == 16, "a decode step carries every request"


def greedy_batch(model, prompts: list[list[int]], **cache) -> list[list[int]]:
    config = GenerationConfig(max_new_tokens=5, do_sample=False, eos_token_id=2, pad_token_id=0)
    outputs = model.generate_batch(prompts, generation_config=config, progress_bar=False, **cache)
    ordered = sorted(outputs.values(), key=lambda output: int(output.request_id.rsplit("_", 1)[1]))
    return [output.generated_tokens for output in ordered]


@torch.no_grad()
def test_a_cache_smaller_than_the_rollout_gives_the_same_completions() -> None:
    """Why an estimate of the longest prompt is enough: requests that do not fit wait for free pages."""
    tokenizer = build_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()
    prompts = [tokenizer(f"{a}+{b}=")["input_ids"] for a in range(8) for b in range(4)]
    sized = paged_cache_config(len(prompts), max(map(len, prompts)), 5)
    plain = greedy_batch(model, prompts, continuous_batching_config=sized)
    sized.num_blocks = 1
    assert greedy_batch(model, prompts, continuous_batching_config=sized) == plain
    assert any(2 in row for row in plain), "the warmed-up model ends some sums"


PEAK_MEMORY = """
import json, resource, sys, torch
from accelerate import Accelerator
from llm_rl.generation.generators import build_generator
from llm_rl.generation.sampling import SamplingSettings
from llm_rl.models.tiny import build_tokenizer, tiny_model_path
from transformers import AutoModelForCausalLM

tokenizer = build_tokenizer()
policy = AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()
batch = tokenizer.pad({"input_ids": [tokenizer(f"{a}+{b}=")["input_ids"] for a in range(8) for b in range(8)]})
sampling = SamplingSettings(max_new_tokens=5, temperature=1.0, pad_token_id=tokenizer.pad_token_id, backend="paged")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
generator = build_generator(lambda: policy, Accelerator(cpu=True), sampling, 64, policy_of=lambda m: m)
completions = generator.generate(torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]).bool())
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": completions.completion_ids.shape[0], "grown_kib": after - before}))
"""


def test_paged_generation_takes_memory_for_its_rollout_not_for_the_host() -> None:
    """transformers alone sizes the cache to most of a CPU host's free RAM (14 GiB for this model here)."""
    tiny_model_path()  # built once, outside the measured process
    result = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY], capture_output=True, text=True, cwd=REPO, timeout=600, check=True
    )
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["rows"] == 64
    assert measured["grown_kib"] < 1024**2, (
        f"paged generation grew the process by {measured['grown_kib']} KiB"
    )

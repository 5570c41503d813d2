"""What the serve and sample tests share: a short GRPO run of the embedded recipe (once per test module),
and what transformers' own generate writes for a prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import short_grpo_run


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trained") / "grpo"
    short_grpo_run(folder)
    return folder


def greedy_completion(final: Path, prompt: str, max_new_tokens: int) -> str:
    """What transformers' own generate writes for a prompt, greedily, up to EOS."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(final)
    assert not tokenizer.chat_template, "the embedded tokenizer is expected to have no chat template"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **ids, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
        )
    response = out[0, ids["input_ids"].shape[1] :].tolist()
    if tokenizer.eos_token_id in response:
        response = response[: response.index(tokenizer.eos_token_id)]
    return tokenizer.decode(response, skip_special_tokens=True)

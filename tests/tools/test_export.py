"""`llm-rl export` of trained policies: full weights in the dtype asked, and a LoRA adapter kept or merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import LLM_RL, run_entry, short_grpo_run


def export(*args: str) -> None:
    result = run_entry(["export", *args], launcher=[LLM_RL], timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]


def test_export_writes_the_policy_in_the_dtype_asked(tmp_path: Path) -> None:
    final = short_grpo_run(tmp_path / "grpo")
    export(str(tmp_path / "grpo"), "--dtype", "bf16", "-o", str(tmp_path / "out"))
    written, trained = (
        load_file(tmp_path / "out" / "model.safetensors"),
        load_file(final / "model.safetensors"),
    )
    assert written.keys() == trained.keys()
    for name, tensor in trained.items():
        assert written[name].dtype == torch.bfloat16
        torch.testing.assert_close(written[name], tensor.to(torch.bfloat16), rtol=0, atol=0)
    assert (tmp_path / "out" / "tokenizer.json").exists()
    again = run_entry(
        ["export", str(tmp_path / "grpo"), "-o", str(tmp_path / "out")], launcher=[LLM_RL], timeout=120
    )
    assert again.returncode == 2 and "not empty" in again.stderr


@pytest.mark.floors
def test_export_of_a_lora_run_keeps_or_merges_the_adapter(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    final = short_grpo_run(tmp_path / "grpo", "model.lora.enabled=true", "model.lora.r=4")
    export(str(final), "-o", str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_config.json").exists() and not (
        tmp_path / "adapter" / "config.json"
    ).exists()
    export(str(final), "--merge-lora", "--dtype", "fp32", "-o", str(tmp_path / "merged"))
    base = json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
    expected = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base), str(final)
    ).merge_and_unload()
    written = load_file(tmp_path / "merged" / "model.safetensors")
    for name, tensor in expected.state_dict().items():
        torch.testing.assert_close(written[name], tensor, rtol=0, atol=0, msg=name)

"""`load_weights`: a checkpoint's weights back into a model in place (full, tied, LoRA), and a missing,
cut-short or mismatched file refused in one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from llm_rl.errors import CheckpointError
from llm_rl.models.tiny import tiny_model_path
from llm_rl.training.checkpoint_files import load_weights


def fresh_model() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(tiny_model_path())


def changed_checkpoint(folder: Path) -> dict[str, torch.Tensor]:
    """A checkpoint of the model with every weight moved, saved as `save_pretrained` saves it."""
    model = fresh_model()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5)
    model.save_pretrained(folder)
    return {key: value.clone() for key, value in model.state_dict().items()}


def test_full_weights_load_in_place(tmp_path: Path) -> None:
    saved = changed_checkpoint(tmp_path / "ckpt")
    model = fresh_model()
    load_weights(model, tmp_path / "ckpt")
    assert all(torch.equal(model.state_dict()[key], value) for key, value in saved.items())


@pytest.mark.floors
def test_a_lora_adapter_loads_into_its_peft_model(tmp_path: Path) -> None:
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    torch.manual_seed(0)
    trained = get_peft_model(fresh_model(), config)
    trained.save_pretrained(tmp_path / "adapter")
    torch.manual_seed(1)
    model = get_peft_model(fresh_model(), config)
    load_weights(model, tmp_path / "adapter")
    ours, theirs = model.state_dict(), trained.state_dict()
    lora = [key for key in ours if "lora_" in key]
    assert lora and all(torch.equal(ours[key], theirs[key]) for key in lora)


def test_a_cut_short_or_missing_weights_file_is_named(tmp_path: Path) -> None:
    changed_checkpoint(tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=rf"^{weights}: unreadable \("):
        load_weights(fresh_model(), tmp_path / "ckpt")
    weights.unlink()
    with pytest.raises(CheckpointError, match=rf"^{weights}: missing$"):
        load_weights(fresh_model(), tmp_path / "ckpt")


def test_weights_of_another_model_are_refused(tmp_path: Path) -> None:
    changed_checkpoint(tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "model.safetensors"
    state = load_file(weights)
    state["model.extra.weight"] = torch.zeros(2)
    del state["model.norm.weight"]
    save_file(state, weights)
    with pytest.raises(
        CheckpointError, match=r"does not fit the model: it has weights the model lacks model\.extra"
    ):
        load_weights(fresh_model(), tmp_path / "ckpt")
    del state["model.extra.weight"]
    save_file(state, weights)
    with pytest.raises(CheckpointError, match=r"does not fit the model: it lacks model\.norm\.weight"):
        load_weights(fresh_model(), tmp_path / "ckpt")

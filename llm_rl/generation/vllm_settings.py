"""How a colocated vLLM engine starts (`generation.vllm`), apart from the engine itself, so that reading a
recipe never imports vLLM (`llm_rl.generation.vllm_engine` does)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from llm_rl.errors import RecipeError
from llm_rl.models.load import resolve_model_path
from llm_rl.monitoring.progress import bars_wanted
from llm_rl.schema import Recipe, VLLMSection
from llm_rl.training.args import device_args, world_size

# TRL's colocated engines take at most this many tokens a scheduler step: vLLM's profiler otherwise
# reserves memory for its much larger default.
MAX_BATCHED_TOKENS = 4096
# The `generation.vllm` keys of server mode alone: where `trl vllm-serve` listens, how long to wait for it,
# and the port of the group that sends it the weights.
SERVER_KEYS = ("server_base_url", "server_host", "server_port", "server_timeout", "group_port")
# TRL's settings of the importance-sampling correction beside its switch (`generation.vllm.importance_sampling`):
# fields of TRL's GRPOConfig, which stay in the algorithm's section.
IMPORTANCE_SAMPLING_FIELDS = (
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_cap",
)


@dataclass(frozen=True)
class EngineSettings:
    """How an engine starts: what `vllm.LLM` is given beyond TRL's own settings."""

    # The folder the engine starts from: its config, tokenizer and first weights.
    model: str
    # A tokenizer folder of its own (`model.tokenizer`); None: the model folder's.
    tokenizer: str | None
    dtype: str
    enforce_eager: bool
    gpu_memory_utilization: float
    tensor_parallel_size: int
    max_model_length: int | None
    kv_cache_bytes: int | None
    sleep_mode: bool
    trust_remote_code: bool
    # vLLM's bar while it loads the weights: for a person at a terminal only (`monitoring.progress`).
    progress_bars: bool
    # Whether the engine reads the model's generation_config.json (its EOS ids), as TRL's GRPO and RLOO
    # have it; PPO samples with the recipe's settings and stop tokens alone.
    model_generation_config: bool = True


def engine_settings(
    recipe: Recipe, model_path: str, tokenizer_path: str | None, model_generation_config: bool = True
) -> EngineSettings:
    """The engine a recipe's `generation.vllm` section describes, starting from `model_path`."""
    section = recipe.generation.vllm
    return EngineSettings(
        model=model_path,
        tokenizer=tokenizer_path,
        dtype=engine_dtype(section.dtype, recipe.training.precision),
        enforce_eager=(not torch.cuda.is_available())
        if section.enforce_eager is None
        else section.enforce_eager,
        gpu_memory_utilization=section.gpu_memory_utilization,
        tensor_parallel_size=section.tensor_parallel_size,
        max_model_length=section.max_model_length,
        kv_cache_bytes=None if section.kv_cache_gb is None else int(section.kv_cache_gb * 2**30),
        sleep_mode=section.sleep_mode,
        trust_remote_code=recipe.model.trust_remote_code,
        progress_bars=bars_wanted(recipe.monitoring.progress),
        model_generation_config=model_generation_config,
    )


def folder_engine_settings(folder: Path, weights: Path, recipe: Recipe | None) -> EngineSettings:
    """An engine for a saved policy (`llm-rl sample`): the run's vLLM settings where it had them, the weights
    from `weights` (an adapter's merged copy), the tokenizer from `folder`, the model's generation config
    left out (the request says how to sample)."""
    return engine_settings(recipe or Recipe(), str(weights), str(folder), model_generation_config=False)


def engine_dtype(dtype: str, precision: str) -> str:
    """`generation.vllm.dtype` resolved: `auto` is the precision training computes in on this host."""
    if dtype != "auto":
        return dtype
    args = device_args(precision)
    return "bfloat16" if args["bf16"] else "float16" if args["fp16"] else "float32"


@dataclass
class VLLMInputs:
    """What a trainer gives its vLLM generator beside the sampling settings."""

    # The policy module itself (not a DDP or DeepSpeed wrapper): its parameters are what the engine copies.
    policy: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    engine: EngineSettings


def changed_keys(section: VLLMSection) -> list[str]:
    """The `generation.vllm` keys whose values differ from their defaults."""
    defaults = VLLMSection()
    return [name for name in VLLMSection.model_fields if getattr(section, name) != getattr(defaults, name)]


def check_vllm_recipe(recipe: Recipe) -> None:
    """`generation.vllm` against the rest of the recipe, as the run's processes will see it: no vLLM setting
    without the vllm backend, and tensor-parallel groups that divide the processes."""
    generation = recipe.generation
    section = generation.vllm
    if generation.backend != "vllm":
        changed = changed_keys(section)
        if changed:
            raise RecipeError(
                f"generation.vllm.{changed[0]} is set but generation.backend is {generation.backend!r}: "
                "the vLLM settings apply with generation.backend: vllm only"
            )
        return
    processes = world_size()
    if section.mode == "colocate" and processes % section.tensor_parallel_size:
        raise RecipeError(
            f"generation.vllm.tensor_parallel_size ({section.tensor_parallel_size}) must divide the run's "
            f"{processes} process(es): each group of that many processes shares one engine"
        )


def check_vllm_host(recipe: Recipe) -> None:
    """What this host's vLLM can do for the recipe (after `generation.backend` was found to run here):
    sleep mode, the server's weight transfer, the policy's architecture. Reads the policy's config only."""
    section = recipe.generation.vllm
    from vllm.platforms import current_platform

    device = current_platform.device_name
    if section.sleep_mode and not current_platform.is_sleep_mode_available():
        raise RecipeError(
            f"generation.vllm.sleep_mode: vLLM has no sleep mode on this platform ({device}); set it to false"
        )
    if section.mode == "server":
        if not torch.cuda.is_available():
            raise RecipeError(
                "generation.vllm.mode: 'server' needs CUDA GPUs: TRL sends the policy's weights to a vLLM "
                "server over NCCL after every update; use mode: colocate here"
            )
        return
    check_architecture(recipe)


def check_architecture(recipe: Recipe) -> None:
    """The policy's architecture is one vLLM implements itself (its config is read, no weights): llm_rl's
    engines run vLLM's own implementation, as TRL's GRPO does by default (`vllm_model_impl: vllm`)."""
    path = resolve_model_path(recipe.model.policy)
    problem = architecture_problem(path, recipe.model.trust_remote_code)
    if problem is not None:
        raise RecipeError(f"model.policy: {problem}; use generation.backend: hf")


def architecture_problem(path: str | Path, trust_remote_code: bool = False) -> str | None:
    """Why vLLM cannot load the model at `path` (None when it can, or when its config does not load: the
    model's own check says what is wrong then): its config names no architecture vLLM implements."""
    from transformers import AutoConfig
    from vllm.model_executor.models import ModelRegistry

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - the model's own check (validate, build_components) says what is wrong
        return None
    architectures = list(getattr(config, "architectures", None) or [])
    supported = set(ModelRegistry.get_supported_archs())
    if any(name in supported for name in architectures):
        return None
    shown = ", ".join(architectures) or "no architectures entry in config.json"
    return f"vLLM cannot load this model ({shown}): vLLM has no implementation of its architecture"

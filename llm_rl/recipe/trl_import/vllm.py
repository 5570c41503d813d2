"""TRL's `use_vllm` as `generation.backend: vllm`, and its vLLM settings (older releases' too) as
`generation.vllm`'s, or a row saying why not."""

from __future__ import annotations

from typing import Any

from trl import GRPOConfig

from llm_rl.algorithms.trl_groups.config import field_default
from llm_rl.recipe.accounting import Migration, put
from llm_rl.schema import SHARED_TRL_FIELDS

# TRL's vLLM settings -> our generation.vllm keys (`use_vllm` is generation.backend: vllm; import_vllm).
VLLM_SETTINGS = {
    trl_name: ours for trl_name, ours in SHARED_TRL_FIELDS.items() if ours.startswith("generation.vllm.")
}

# Why a vllm_* key neither this TRL nor an older release (OLD_VLLM_SETTINGS) had is not carried.
OLD_VLLM_FIELD = (
    "a vLLM setting this TRL's GRPOConfig does not have (vLLM now runs through vllm_mode: colocate, or "
    "server with `trl vllm-serve`): not carried"
)

# vLLM settings of older TRL releases: (their default there, our key or None: not carried, what became of them).
OLD_VLLM_SETTINGS: dict[str, tuple[Any, str | None, str]] = {
    "vllm_max_model_len": (
        None,
        "generation.vllm.max_model_length",
        "renamed in TRL to vllm_max_model_length",
    ),
    "vllm_dtype": (
        "auto",
        "generation.vllm.dtype",
        "removed from TRL's GRPOConfig: the engine's precision (llm_rl's auto is the training precision, "
        "vLLM's was the model's)",
    ),
    "vllm_device": (
        "auto",
        None,
        "removed from TRL: TRL's engine now runs inside each training process (vllm_mode: colocate) or "
        "as a separate server (vllm_mode: server, `trl vllm-serve`)",
    ),
    "vllm_enable_prefix_caching": (
        True,
        None,
        "removed from TRL: llm_rl's engine keeps vLLM's own prefix-caching default",
    ),
}
NO_VLLM = "a vLLM setting, and the source generates without vLLM (use_vllm off)"
# generation.vllm.dtype's values, and vLLM's other names for them.
VLLM_DTYPES = {
    "auto": "auto",
    "float32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
}


def import_vllm(flat: dict[str, Any], out: Migration) -> None:
    """`use_vllm` as `generation.backend: vllm`, and TRL's vLLM settings as `generation.vllm`'s. Without
    use_vllm they are not carried (a recipe refuses vLLM settings without the vllm backend): a setting at
    TRL's default gets a plain row, another a warning."""
    on = bool(flat.get("use_vllm"))
    if on:
        put(out.recipe, "generation.backend", "vllm")
        out.keep("use_vllm", flat["use_vllm"], "generation.backend", "vllm")
    elif "use_vllm" in flat:
        out.keep("use_vllm", flat["use_vllm"], "generation.backend", "off: the default backend (auto)")
    for key in (*VLLM_SETTINGS, *OLD_VLLM_SETTINGS):
        if key not in flat:
            continue
        value = flat[key]
        if on:
            import_vllm_setting(key, value, out)
        elif value == trl_vllm_default(key):
            out.keep(key, value, "-", f"TRL's default; {NO_VLLM}")
        else:
            why = OLD_VLLM_SETTINGS[key][2] if key in OLD_VLLM_SETTINGS else ""
            out.warn(key, value, "; ".join(part for part in (why, f"{NO_VLLM}: not carried") if part))


def trl_vllm_default(key: str) -> Any:
    """A vLLM setting's default in TRL's GRPOConfig, or in the older release that had it."""
    return OLD_VLLM_SETTINGS[key][0] if key in OLD_VLLM_SETTINGS else field_default(GRPOConfig, key)


def import_vllm_setting(key: str, value: Any, out: Migration) -> None:
    """One vLLM setting of a source that generates with vLLM, as its `generation.vllm` key where it has one."""
    if key in VLLM_SETTINGS:
        put(out.recipe, VLLM_SETTINGS[key], value)
        out.keep(key, value, VLLM_SETTINGS[key])
        return
    _, target, why = OLD_VLLM_SETTINGS[key]
    if key == "vllm_dtype" and not (isinstance(value, str) and value in VLLM_DTYPES):
        out.warn(
            key, value, f"not a precision generation.vllm.dtype takes ({', '.join(VLLM_DTYPES)}): not carried"
        )
    elif target is None:
        out.warn(key, value, f"{why}: not carried")
    else:
        put(out.recipe, target, VLLM_DTYPES[value] if key == "vllm_dtype" else value)
        out.warn(key, value, why, target)

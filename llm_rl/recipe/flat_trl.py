"""Flat TRL-style GRPO YAMLs (GRPOConfig fields at the top level, plus the script arguments
`model_name_or_path`, `dataset_name`, `reward_funcs`, ...) imported into our GRPO schema, each key
accounted for; `llm-rl migrate` then converts the result like one of our recipes."""

from __future__ import annotations

import copy
from typing import Any

from trl import GRPOConfig

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.algorithms.trl_groups.config import field_default
from llm_rl.errors import RecipeError
from llm_rl.recipe.accounting import Migration, get, put
from llm_rl.schema import SHARED_TRL_FIELDS, Recipe

# Script and model arguments of TRL's and open-r1's scripts -> our keys.
FLAT_KEYS = {
    "model_name_or_path": "model.policy",
    "trust_remote_code": "model.trust_remote_code",
    "attn_implementation": "model.attn_implementation",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "use_peft": "model.lora.enabled",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    "dataset_prompt_column": "data.prompt_column",
    "system_prompt": "data.system_prompt",
    "per_device_eval_batch_size": "evaluation.batch_size",
    "wandb_project": "monitoring.wandb.project",
    "wandb_entity": "monitoring.wandb.entity",
    "wandb_run_group": "monitoring.wandb.group",
}

# TRL's vLLM settings -> our generation.vllm keys (`use_vllm` is generation.backend: vllm; import_vllm).
VLLM_SETTINGS = {
    trl_name: ours for trl_name, ours in SHARED_TRL_FIELDS.items() if ours.startswith("generation.vllm.")
}

# Shared TRL fields that are not one key for one key: each has an import_* function of its own, or is not
# GRPOConfig's (total_episodes).
IMPORTED_APART = {"bf16", "fp16", "report_to", "save_steps", "total_episodes", "use_vllm", *VLLM_SETTINGS}

# TRL config fields our shared sections own -> our keys, for the flat file's top level.
FLAT_SHARED = {
    trl_name: ours
    for trl_name, ours in SHARED_TRL_FIELDS.items()
    if "[" not in ours and trl_name not in IMPORTED_APART
}

# Keys with nothing to carry into llm_rl, and why.
FLAT_NOT_USED = {
    "model_revision": "llm_rl loads the folder or the hub's default revision; pin a revision by downloading it",
    "push_to_hub": "llm_rl writes final/ locally; push it yourself",
    "hub_model_id": "llm_rl does not push to the hub",
    "hub_strategy": "llm_rl does not push to the hub",
    "hub_private_repo": "llm_rl does not push to the hub",
    "overwrite_output_dir": "llm_rl resumes from the run folder (checkpointing.resume); use a new run.output_dir",
    "log_level": "llm_rl prints one progress line per logging step",
    "logging_first_step": "metrics.jsonl holds every logging step",
    "logging_strategy": "llm_rl logs every training.logging_steps updates",
    "do_eval": "llm_rl evaluates when evaluation.every is set",
    "chat_template": (
        "a template string has no recipe key: put it in the model folder's tokenizer_config.json "
        "(chat_template); data.chat_template: true (the default) applies the tokenizer's template"
    ),
    "num_train_epochs": (
        "llm_rl's budget is training.max_steps or training.total_samples (epochs x prompts x completions); "
        "without one a run stops at 10,000 samples"
    ),
    "gradient_checkpointing_kwargs": "llm_rl sets these itself with model.gradient_checkpointing",
    "torch_dtype": "",  # handled in import_dtype
    "dtype": "",
    # open-r1's GRPOConfig additions.
    "benchmarks": "open-r1's post-training benchmarks: llm_rl measures held-out reward with evaluation.every",
    "callbacks": "open-r1's hub-push callbacks: llm_rl writes final/ locally",
    "hub_model_revision": "llm_rl does not push to the hub",
    "num_completions_to_print": "see completions with `llm-rl sample RUN_DIR`",
}

# Switches that are off unless a file turns them on, at their off value -> what llm_rl does instead.
# Off, they get a plain row; on, a warning.
FLAT_SWITCHES: dict[str, tuple[Any, str]] = {
    # TRL's ModelConfig.
    "use_rslora": (False, "llm_rl's LoRA scales by alpha / r (plain LoRA)"),
    "use_dora": (False, "llm_rl's LoRA is plain LoRA, not DoRA"),
    "lora_modules_to_save": (None, "llm_rl's LoRA trains the adapters only"),
    "lora_target_parameters": (None, "llm_rl targets modules (model.lora.target_modules), not parameters"),
    "lora_task_type": ("CAUSAL_LM", "llm_rl's LoRA is for causal LMs"),
    "load_in_8bit": (
        False,
        "llm_rl does not load quantised weights (no QLoRA): the model loads in model.dtype",
    ),
    "load_in_4bit": (
        False,
        "llm_rl does not load quantised weights (no QLoRA): the model loads in model.dtype",
    ),
    "bnb_4bit_quant_type": ("nf4", "a setting of 4-bit loading, which llm_rl does not do"),
    "use_bnb_nested_quant": (False, "a setting of 4-bit loading, which llm_rl does not do"),
    "bnb_4bit_quant_storage": (None, "a setting of 4-bit loading, which llm_rl does not do"),
    # TRL's ScriptArguments.
    "ignore_bias_buffers": (False, "a DDP workaround of TRL's scripts for models with bias buffers"),
    # open-r1's GRPOConfig.
    "overwrite_hub_revision": (False, "llm_rl does not push to the hub"),
    "push_to_hub_revision": (False, "llm_rl does not push to the hub"),
}

# open-r1's settings of its own reward functions (GRPOScriptArguments).
OPEN_R1_REWARD_SETTINGS = {
    "cosine_min_value_wrong", "cosine_max_value_wrong", "cosine_min_value_correct",
    "cosine_max_value_correct", "cosine_max_len", "repetition_n_grams", "repetition_max_penalty",
    "code_language", "code_eval_test_batch_size", "code_eval_scoring_mode", "parallel_code_exec_per_proc",
    "e2b_router_url", "morph_router_url", "code_provider", "ioi_provider", "max_completion_len",
    "soft_punish_cache", "enforce_same_language",
}  # fmt: skip
OPEN_R1_REWARD_NOTE = (
    "a setting of one of open-r1's reward functions: give it as a key of that reward's rewards: entry "
    "(your function by import path receives the entry's keys)"
)

# Keys TRL has removed: the clear word the issue tracker keeps being asked for.
REMOVED_FROM_TRL = {
    "max_prompt_length": (
        "data.max_prompt_length",
        "removed from TRL's GRPOConfig (it no longer truncates prompts); llm_rl drops longer prompts "
        "and counts them",
    ),
    "vllm_guided_decoding_regex": (
        "grpo.vllm_structured_outputs_regex",
        "renamed in TRL to vllm_structured_outputs_regex",
    ),
    "wandb_log_unique_prompts": ("grpo.log_unique_prompts", "renamed in TRL to log_unique_prompts"),
}

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

# Reward names of TRL's grpo script and open-r1 -> our reward entry (without weight), and a note.
FLAT_REWARDS: dict[str, tuple[dict[str, Any], str]] = {
    "accuracy": (
        {"name": "accuracy", "answer_column": "solution"},
        "math-verify against the `solution` column",
    ),
    "accuracy_reward": ({"name": "accuracy", "answer_column": "solution"}, "math-verify against `solution`"),
    "format": ({"name": "format"}, "open-r1's <think>/<answer> format (our default pattern)"),
    "think_format_reward": (
        {"name": "format", "pattern": r"^<think>(?!.*<think>)(.*?)</think>.*$", "alias": "think_format"},
        "TRL's think_format_reward pattern",
    ),
}

DTYPE_NAMES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "auto": "auto"}


def import_flat(flat: dict[str, Any]) -> Migration:
    """A flat TRL-style GRPO YAML as our GRPO recipe, each key accounted for."""
    grpo_fields = ALGORITHMS["grpo"].section_fields()
    out = Migration({"algorithm": "grpo"})
    handled = {
        "reward_funcs", "reward_weights", "reward_model_name_or_path", "bf16", "fp16", "report_to",
        "save_strategy", "save_steps", "resume_from_checkpoint", "eval_strategy", "evaluation_strategy",
        "eval_steps", "use_vllm", *VLLM_SETTINGS, *OLD_VLLM_SETTINGS, *DATA_KEYS,
    }  # fmt: skip
    import_data(flat, out)
    import_vllm(flat, out)
    import_rewards(flat, out)
    import_precision(flat, out)
    import_reporting(flat, out)
    import_saving(flat, out)
    import_resume(flat, out)
    import_evaluation(flat, out)
    import_trl_defaults(flat, out)
    for key, value in flat.items():
        if key in handled:
            continue
        if key in FLAT_KEYS:
            put(out.recipe, FLAT_KEYS[key], value)
            out.keep(key, value, FLAT_KEYS[key])
        elif key in ("torch_dtype", "dtype"):
            import_dtype(key, value, out)
        elif key in REMOVED_FROM_TRL:
            target, why = REMOVED_FROM_TRL[key]
            put(out.recipe, target, value)
            out.warn(key, value, why, target)
        elif key == "max_steps":
            if isinstance(value, int) and value > 0:
                put(out.recipe, "training.max_steps", value)
                out.keep(key, value, "training.max_steps")
            else:
                out.warn(key, value, "no step limit: give training.max_steps or training.total_samples")
        elif key in FLAT_SHARED:
            put(out.recipe, FLAT_SHARED[key], value)
            out.keep(key, value, FLAT_SHARED[key])
        elif key in FLAT_NOT_USED:
            out.warn(key, value, f"not used: {FLAT_NOT_USED[key]}")
        elif key in FLAT_SWITCHES:
            import_switch(key, value, out)
        elif key in OPEN_R1_REWARD_SETTINGS:
            out.warn(key, value, OPEN_R1_REWARD_NOTE)
        elif key in grpo_fields:
            put(out.recipe, f"grpo.{key}", value)
            out.keep(key, value, f"grpo.{key}")
        elif key.startswith("vllm_"):
            out.warn(key, value, OLD_VLLM_FIELD)
        else:
            out.warn(key, value, "not a field of TRL's GRPOConfig or of its scripts: not carried")
    return out


# Script arguments that name the data: TRL's (`dataset_*`, and `datasets` with `streaming` and
# `test_split_size`, its DatasetMixtureConfig) and open-r1's `dataset_mixture`.
DATA_KEYS = (
    "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "dataset_streaming",
    "datasets", "streaming", "test_split_size", "dataset_mixture",
)  # fmt: skip
NO_STREAMING = "llm_rl reads the whole dataset before training (no streaming): not carried"


def import_data(flat: dict[str, Any], out: Migration) -> None:
    """The data the source trains on: one dataset, TRL's `datasets:` mixture or open-r1's
    `dataset_mixture`; the mixture wins where both are given, as in both scripts."""
    mixture = flat.get("datasets") or (flat.get("dataset_mixture") or {}).get("datasets")
    if mixture:
        import_mixture(flat, out)
    elif flat.get("dataset_name"):
        import_single_dataset(flat, out)
    else:
        for key in ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split"):
            if key in flat:
                out.keep(key, flat[key], "-", "names no dataset")
        out.warn(
            "(no dataset)",
            None,
            "the source names no dataset: the recipe trains on builtin:arithmetic, the toy task; set data.source",
            "data.source",
        )
    for key in ("dataset_streaming", "streaming"):
        if key in flat:
            if flat[key]:
                out.warn(key, flat[key], NO_STREAMING)
            else:
                out.keep(key, flat[key], "-", "off, as in llm_rl")


def import_single_dataset(flat: dict[str, Any], out: Migration) -> None:
    """`dataset_name` with its configuration and splits."""
    for key, target in (
        ("dataset_name", "data.source"),
        ("dataset_config", "data.config"),
        ("dataset_train_split", "data.split"),
        ("dataset_test_split", "data.eval_split"),
    ):
        if flat.get(key) is not None:
            put(out.recipe, target, flat[key])
            out.keep(key, flat[key], target)
        elif key in flat:
            out.keep(key, None, "-", "null: not set")
    for key in ("datasets", "dataset_mixture", "test_split_size"):
        if key in flat:
            out.warn(key, flat[key], "empty or unused by the source: not carried")


def import_mixture(flat: dict[str, Any], out: Migration) -> None:
    """TRL's `datasets:` list or open-r1's `dataset_mixture` as `data.sources`."""
    trl_style = bool(flat.get("datasets"))
    key = "datasets" if trl_style else "dataset_mixture"
    entries = flat["datasets"] if trl_style else flat["dataset_mixture"]["datasets"]
    listed_under = "datasets" if trl_style else "dataset_mixture.datasets"
    sources = []
    for index, entry in enumerate(entries):
        where = f"{listed_under}[{index}]"
        if not isinstance(entry, dict):
            raise RecipeError(f"{where}: a dataset of the mixture must be a mapping (path, split, ...)")
        source = (
            import_trl_dataset(entry, where, out) if trl_style else import_open_r1_dataset(entry, where, out)
        )
        sources.append(source)
        out.keep(where, entry, f"data.sources[{index}]")
    weighted = [index for index, source in enumerate(sources) if "weight" in source]
    if weighted and len(weighted) < len(sources):
        unweighted = next(index for index in range(len(sources)) if index not in weighted)
        field = "fraction" if trl_style else "weight"
        raise RecipeError(
            f"{listed_under}[{unweighted}].{field}: set on other datasets of the mixture and not on this one; set it on every "
            "dataset or on none (the source's own script refuses this file too)"
        )
    put(out.recipe, "data.sources", sources)
    size_key = "test_split_size" if trl_style else "dataset_mixture.test_split_size"
    size = flat.get("test_split_size") if trl_style else flat["dataset_mixture"].get("test_split_size")
    if size is not None:
        put(out.recipe, "data.eval_size", size)
        out.keep(size_key, size, "data.eval_size", "held out of the mixture, seeded by run.seed")
    if not trl_style:
        seed = flat["dataset_mixture"].get("seed")
        if seed is not None:
            out.keep("dataset_mixture.seed", seed, "-", "llm_rl shuffles each source with run.seed")
    for other in ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split"):
        if other in flat:
            out.warn(other, flat[other], f"unused: the source's script reads {key} when both are given")
    if not trl_style and "datasets" in flat:
        out.warn("datasets", flat["datasets"], "empty: the mixture is dataset_mixture's")


def import_trl_dataset(entry: dict[str, Any], where: str, out: Migration) -> dict[str, Any]:
    """One entry of TRL's `datasets:` (its DatasetConfig) as one of `data.sources`."""
    path = entry.get("path")
    files = entry.get("data_files")
    source: dict[str, Any] = {"source": path}
    if path in GENERIC_BUILDERS and isinstance(files, str):
        source["source"] = files  # `path: json, data_files: x.jsonl` is the file x.jsonl
    elif files is not None:
        out.warn(
            f"{where}.data_files",
            files,
            "llm_rl reads a hub dataset's own files or one local file: not carried",
        )
    if not isinstance(source["source"], str):
        raise RecipeError(f"{where}.path: each dataset of the mixture needs a path or hub id")
    source |= renamed_fields(entry, {"name": "config", "split": "split", "columns": "columns"})
    if entry.get("fraction") is not None:
        source["weight"] = float(entry["fraction"])
    if entry.get("data_dir") is not None:
        out.warn(
            f"{where}.data_dir",
            entry["data_dir"],
            "llm_rl reads the whole hub dataset: download the folder you need and name it as the source",
        )
    unknown = sorted(set(entry) - {"path", "name", "data_dir", "data_files", "split", "columns", "fraction"})
    for name in unknown:
        out.warn(f"{where}.{name}", entry[name], "not a field of TRL's DatasetConfig: not carried")
    return source


def import_open_r1_dataset(entry: dict[str, Any], where: str, out: Migration) -> dict[str, Any]:
    """One entry of open-r1's `dataset_mixture.datasets` as one of `data.sources`."""
    if not isinstance(entry.get("id"), str):
        raise RecipeError(f"{where}.id: each dataset of the mixture needs a hub id or path")
    source: dict[str, Any] = {"source": entry["id"]}
    source |= renamed_fields(entry, {"config": "config", "split": "split", "columns": "columns"})
    if entry.get("weight") is not None:
        source["weight"] = float(entry["weight"])
        out.warn(
            f"{where}.weight",
            entry["weight"],
            "open-r1 keeps this fraction of the dataset's rows; llm_rl's weight is the dataset's share of "
            "the mixture (TRL's fraction): the shares differ where the datasets' sizes do",
            "data.sources[].weight",
        )
    for name in sorted(set(entry) - {"id", "config", "split", "columns", "weight"}):
        out.warn(f"{where}.{name}", entry[name], "not a field of open-r1's DatasetConfig: not carried")
    return source


def renamed_fields(entry: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The entry's fields named in `names` (theirs -> ours) that it sets, under our names."""
    return {ours: entry[theirs] for theirs, ours in names.items() if entry.get(theirs) is not None}


# `datasets` builders that read the files named in `data_files`.
GENERIC_BUILDERS = {"json", "csv", "parquet"}


# GRPOConfig defaults that differ from llm_rl's and change what is learned or what fits in memory: a
# file that leaves them out ran with TRL's, so the recipe gets TRL's, each with a row.
CARRIED_TRL_DEFAULTS = ("max_completion_length", "lr_scheduler_type", "gradient_checkpointing")
# Defaults that differ too, for settings llm_rl owns as part of a run that is safe to leave running
# (logging every update, checkpoints by samples, keeping the last two, resuming its own folder): the
# recipe states llm_rl's value, and the row says what TRL would have done.
OWN_DEFAULTS = {
    "logging_steps": (
        "training.logging_steps",
        "llm_rl logs every update: alerts and early stopping read each row",
    ),
    "save_steps": ("checkpointing.every", "llm_rl checkpoints every 100,000 samples"),
    "save_total_limit": ("checkpointing.keep_last", "TRL keeps every checkpoint; llm_rl the last 2"),
    "resume_from_checkpoint": (
        "checkpointing.resume",
        "llm_rl resumes its own run folder's latest checkpoint",
    ),
}


def import_trl_defaults(flat: dict[str, Any], out: Migration) -> None:
    """A row and an explicit value for each GRPOConfig default the file relies on that differs from ours."""
    ours = Recipe().to_dict()
    for key in CARRIED_TRL_DEFAULTS:
        target = FLAT_SHARED[key]
        default = field_default(GRPOConfig, key)
        if key not in flat and default != get(ours, target):
            put(out.recipe, target, default)
            out.keep(
                f"{key} (TRL default)", default, target, f"llm_rl's own default is {get(ours, target)!r}"
            )
    for key, (target, why) in OWN_DEFAULTS.items():
        default = field_default(GRPOConfig, key)
        set_by_file = key in flat or (key == "save_steps" and "save_strategy" in flat)
        if not set_by_file and default != get(ours, target):
            put(out.recipe, target, get(ours, target))
            out.keep(f"{key} (TRL default)", default, target, f"kept llm_rl's {get(ours, target)!r}: {why}")
    if field_default(GRPOConfig, "max_steps") <= 0 and not {"max_steps", "num_train_epochs"} & set(flat):
        epochs = field_default(GRPOConfig, "num_train_epochs")
        out.warn("num_train_epochs (TRL default)", epochs, f"not used: {FLAT_NOT_USED['num_train_epochs']}")


def import_rewards(flat: dict[str, Any], out: Migration) -> None:
    """`reward_model_name_or_path`, `reward_funcs` and `reward_weights` as our `rewards:` list."""
    names = list(flat.get("reward_funcs") or [])
    weights = flat.get("reward_weights")
    entries: list[dict[str, Any]] = []
    path = flat.get("reward_model_name_or_path")
    if path:
        entries.append({"name": "reward_model", "path": path})
        out.keep("reward_model_name_or_path", path, "rewards[0] (reward_model)")
    elif "reward_model_name_or_path" in flat:
        out.keep("reward_model_name_or_path", path, "-", "no reward model")
    if "reward_funcs" in flat and not names:
        out.keep("reward_funcs", flat["reward_funcs"], "-", "no reward functions named")
    for name in names:
        index = len(entries)
        if name in FLAT_REWARDS:
            entry, note = FLAT_REWARDS[name]
            entries.append(copy.deepcopy(entry))
            out.keep(f"reward_funcs: {name}", name, f"rewards[{index}] ({entry['name']})", note)
        elif ":" in name or "." in name:
            module, _, function = name.rpartition(":" if ":" in name else ".")
            entries.append({"name": f"{module}:{function}"})
            out.keep(f"reward_funcs: {name}", name, f"rewards[{index}]", "your function, by import path")
        else:
            entries.append({"name": name})
            out.warn(
                f"reward_funcs: {name}",
                name,
                "no built-in of this name: name your implementation as package.module:function",
                f"rewards[{index}]",
            )
    if weights is not None:
        if len(weights) != len(entries):
            raise RecipeError(f"reward_weights: {len(weights)} weights for {len(entries)} reward functions")
        for entry, weight in zip(entries, weights, strict=True):
            entry["weight"] = float(weight)
        out.keep("reward_weights", weights, "rewards[].weight")
    if entries:
        out.recipe["rewards"] = entries


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


def import_switch(key: str, value: Any, out: Migration) -> None:
    """A switch llm_rl does not have: a plain row when it is off, a warning naming what llm_rl does
    instead when it is on."""
    off, instead = FLAT_SWITCHES[key]
    if value == off or value is None:
        out.keep(key, value, "-", f"off, as in llm_rl: {instead}")
    else:
        out.warn(key, value, f"not carried: {instead}")


def import_precision(flat: dict[str, Any], out: Migration) -> None:
    """`bf16` / `fp16` as `training.precision`: the one switched on, else auto."""
    chosen = next((key for key in ("bf16", "fp16") if flat.get(key)), None)
    for key in ("bf16", "fp16"):
        if key not in flat:
            continue
        if key == chosen:
            put(out.recipe, "training.precision", key)
            out.keep(key, flat[key], "training.precision", key)
        elif chosen:
            out.keep(key, flat[key], "training.precision", f"off: {chosen} is on")
        else:
            out.keep(key, flat[key], "training.precision", "off: auto (bf16 where the GPU has it, else fp32)")


def import_dtype(key: str, value: Any, out: Migration) -> None:
    """`torch_dtype` / `dtype` as `model.dtype`."""
    if value in DTYPE_NAMES:
        put(out.recipe, "model.dtype", DTYPE_NAMES[value])
        out.keep(key, value, "model.dtype")
    else:
        out.warn(key, value, f"not a dtype llm_rl loads ({', '.join(DTYPE_NAMES)})")


def import_reporting(flat: dict[str, Any], out: Migration) -> None:
    """`report_to` as the wandb mode and the TensorBoard switch."""
    if "report_to" not in flat:
        return
    value = flat["report_to"]
    targets = [value] if isinstance(value, str) else list(value or [])
    mode = "auto" if "wandb" in targets or "all" in targets else "disabled"
    put(out.recipe, "monitoring.wandb.mode", mode)
    if "tensorboard" in targets or "all" in targets:
        put(out.recipe, "monitoring.tensorboard", True)
    out.keep("report_to", value, "monitoring.wandb.mode", f"wandb {mode}")


def import_saving(flat: dict[str, Any], out: Migration) -> None:
    """`save_strategy` and `save_steps`: a cadence in updates, and nothing from a run that saved nothing."""
    strategy = flat.get("save_strategy", "steps")
    if "save_strategy" in flat:
        if strategy == "steps" and "save_steps" in flat:
            out.keep("save_strategy", strategy, "checkpointing.unit", "every save_steps updates")
        else:
            why = {
                "no": "the source saved no checkpoints",
                "steps": "TRL's default save_steps is not carried",
            }.get(strategy, "checkpointing.every counts samples or steps, not epochs")
            out.warn(
                "save_strategy",
                strategy,
                f"{why}: llm_rl checkpoints every checkpointing.every (default 100,000 samples)",
            )
    if "save_steps" in flat and import_cadence(flat, "save_steps", "save_strategy", strategy, out):
        put(out.recipe, "checkpointing.every", flat["save_steps"])
        put(out.recipe, "checkpointing.unit", "steps")
        out.keep("save_steps", flat["save_steps"], "checkpointing.every", "unit: steps")


def import_resume(flat: dict[str, Any], out: Migration) -> None:
    """`resume_from_checkpoint`: false or null never resumes, true the latest checkpoint, a path that one."""
    if "resume_from_checkpoint" not in flat:
        return
    value = flat["resume_from_checkpoint"]
    if isinstance(value, str):
        resume = value
    elif value is True:
        resume = "auto"
    elif value is False or value is None:
        resume = "never"
    else:
        out.warn("resume_from_checkpoint", value, "neither a path nor true/false: not carried")
        return
    put(out.recipe, "checkpointing.resume", resume)
    out.keep("resume_from_checkpoint", value, "checkpointing.resume", f"{resume!r}")


def import_evaluation(flat: dict[str, Any], out: Migration) -> None:
    """`eval_strategy` (or its old name `evaluation_strategy`) and `eval_steps`: held-out reward every
    `eval_steps` updates, or never."""
    key = "eval_strategy" if "eval_strategy" in flat else "evaluation_strategy"
    strategy = flat.get(key, "steps" if "eval_steps" in flat else "no")
    if key in flat:
        if strategy == "steps":
            out.keep(key, strategy, "evaluation.every", "every eval_steps updates")
        elif strategy == "no":
            out.keep(key, strategy, "evaluation.every", "never: the source did not evaluate")
        else:
            out.warn(key, strategy, "evaluation.every counts updates, not epochs: not carried")
    if "eval_steps" in flat and import_cadence(flat, "eval_steps", key, strategy, out):
        put(out.recipe, "evaluation.every", flat["eval_steps"])
        out.keep("eval_steps", flat["eval_steps"], "evaluation.every")


def import_cadence(flat: dict[str, Any], key: str, strategy_key: str, strategy: str, out: Migration) -> bool:
    """Whether `save_steps` or `eval_steps` carries over: a whole number of updates under the `steps`
    strategy; otherwise a warning row says why not."""
    value = flat[key]
    if strategy != "steps":
        out.warn(key, value, f"not used by the source ({strategy_key} {strategy!r}): not carried")
        return False
    if not (isinstance(value, int) and value >= 1):
        out.warn(key, value, "a fraction of the run: not carried; give a number of updates")
        return False
    return True

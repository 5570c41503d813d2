"""`llm-rl migrate`: a GRPO recipe into a PPO recipe (and back), with an account of every source key.

Two kinds of source are read: our own recipes (their `extends:` chain resolved) and the flat
TRL-style YAMLs that public TRL-based projects use (GRPOConfig fields at the top level, plus the
script arguments `model_name_or_path`, `dataset_name`, `reward_funcs`, ...). A flat file is first
imported into our GRPO schema, then converted. Each source key gets one row in the printed table:
where it went, or why it has no counterpart (a warning). No key is dropped silently.

What the conversion keeps and what it changes is documented in docs/migration.md.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm_rl.algorithms.base import Algorithm, Counterpart
from llm_rl.algorithms.registry import ALGORITHMS, known_names
from llm_rl.errors import RecipeError
from llm_rl.recipe.load import read_recipe_file, read_yaml_mapping, validate_recipe
from llm_rl.schema import SHARED_TRL_FIELDS, Recipe


@dataclass
class KeyFate:
    """One row of the migration table: a source key, its value, where it went and why."""

    source: str
    value: Any
    target: str
    note: str = ""
    warning: bool = False


@dataclass
class Migration:
    """The converted recipe (plain data, ready for YAML) and the fate of every source key."""

    recipe: dict[str, Any]
    rows: list[KeyFate] = field(default_factory=list)

    def keep(self, source: str, value: Any, target: str, note: str = "") -> None:
        self.rows.append(KeyFate(source, value, target, note))

    def warn(self, source: str, value: Any, note: str, target: str = "-") -> None:
        self.rows.append(KeyFate(source, value, target, note, warning=True))

    @property
    def warnings(self) -> list[KeyFate]:
        return [row for row in self.rows if row.warning]

    def table(self) -> str:
        """The rows as an aligned text table; warnings are marked with `!`."""
        cells = [("", "source key", "value", "became", "note")]
        cells += [("!" if r.warning else "", r.source, short(r.value), r.target, r.note) for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(4)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
            for row in cells
        ]
        return "\n".join(line.rstrip() for line in lines)


def short(value: Any, limit: int = 40) -> str:
    """A value as one short line of text (JSON for anything but strings)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------------
# Reading the source
# ----------------------------------------------------------------------------------------------------


def read_source(path: Path) -> tuple[dict[str, Any], bool]:
    """The source recipe as a mapping (extends resolved) and whether it is a flat TRL-style file."""
    raw = read_yaml_mapping(path)
    ours = set(Recipe.model_fields) | {"extends"}
    if any(key in ours and isinstance(value, dict | list | str) for key, value in raw.items()):
        return read_recipe_file(path), False
    return raw, True


def leaves(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) for every non-mapping value; lists are leaves."""
    found = []
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            found += leaves(value, f"{dotted}.")
        else:
            found.append((dotted, value))
    return found


def put(mapping: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key in a nested mapping, creating sections on the way."""
    *sections, last = dotted.split(".")
    for name in sections:
        mapping = mapping.setdefault(name, {})
    mapping[last] = value


def get(mapping: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """A dotted key of a nested mapping, or `default`."""
    for name in dotted.split("."):
        if not isinstance(mapping, dict) or name not in mapping:
            return default
        mapping = mapping[name]
    return mapping


# ----------------------------------------------------------------------------------------------------
# Flat TRL-style GRPO YAMLs -> our GRPO schema
# ----------------------------------------------------------------------------------------------------

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
    "dataset_name": "data.source",
    "dataset_train_split": "data.split",
    "dataset_test_split": "data.eval_split",
    "dataset_prompt_column": "data.prompt_column",
    "system_prompt": "data.system_prompt",
    "eval_steps": "evaluation.every",
    "per_device_eval_batch_size": "evaluation.batch_size",
    "wandb_project": "monitoring.wandb.project",
    "wandb_entity": "monitoring.wandb.entity",
}

# TRL config fields our shared sections own -> our keys, for the flat file's top level.
FLAT_SHARED = {
    trl_name: ours
    for trl_name, ours in SHARED_TRL_FIELDS.items()
    if "[" not in ours and trl_name not in {"bf16", "fp16", "report_to", "save_steps", "total_episodes"}
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
    "save_strategy": "llm_rl saves by checkpointing.every / checkpointing.unit",
    "eval_strategy": "llm_rl evaluates every evaluation.every updates",
    "do_eval": "llm_rl evaluates when evaluation.every is set",
    "num_train_epochs": (
        "llm_rl's budget is training.max_steps or training.total_samples (epochs x prompts x completions); "
        "without one a run stops at 10,000 samples"
    ),
    "gradient_checkpointing_kwargs": "llm_rl sets these itself with model.gradient_checkpointing",
    "dataset_config": "llm_rl reads a hub dataset's default configuration; save the one you need locally",
    "torch_dtype": "",  # handled in import_dtype
    "dtype": "",
}

# Keys TRL has removed: the clear word the issue tracker keeps being asked for.
REMOVED_FROM_TRL = {
    "max_prompt_length": (
        "data.max_prompt_length",
        "removed from TRL's GRPOConfig (it no longer truncates prompts); llm_rl drops longer prompts "
        "and counts them",
    ),
    "vllm_max_model_len": ("grpo.vllm_max_model_length", "renamed in TRL to vllm_max_model_length"),
    "vllm_guided_decoding_regex": (
        "grpo.vllm_structured_outputs_regex",
        "renamed in TRL to vllm_structured_outputs_regex",
    ),
    "wandb_log_unique_prompts": ("grpo.log_unique_prompts", "renamed in TRL to log_unique_prompts"),
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
    handled = {"reward_funcs", "reward_weights", "reward_model_name_or_path", "bf16", "fp16", "report_to"}
    import_rewards(flat, out)
    import_precision(flat, out)
    import_reporting(flat, out)
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
        elif key == "save_steps":
            import_save_steps(flat, value, out)
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
        elif key in grpo_fields:
            put(out.recipe, f"grpo.{key}", value)
            out.keep(key, value, f"grpo.{key}")
        else:
            out.warn(key, value, "not a field of TRL's GRPOConfig or of its scripts: not carried")
    return out


def import_rewards(flat: dict[str, Any], out: Migration) -> None:
    """`reward_model_name_or_path`, `reward_funcs` and `reward_weights` as our `rewards:` list."""
    names = list(flat.get("reward_funcs") or [])
    weights = flat.get("reward_weights")
    entries: list[dict[str, Any]] = []
    path = flat.get("reward_model_name_or_path")
    if path:
        entries.append({"name": "reward_model", "path": path})
        out.keep("reward_model_name_or_path", path, "rewards[0] (reward_model)")
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
            raise RecipeError(
                f"reward_weights has {len(weights)} weights for {len(entries)} reward functions",
                where="reward_weights",
            )
        for entry, weight in zip(entries, weights, strict=True):
            entry["weight"] = float(weight)
        out.keep("reward_weights", weights, "rewards[].weight")
    if entries:
        out.recipe["rewards"] = entries


def import_precision(flat: dict[str, Any], out: Migration) -> None:
    """`bf16` / `fp16` as `training.precision`."""
    for key in ("bf16", "fp16"):
        if key in flat:
            if flat[key]:
                put(out.recipe, "training.precision", key)
                out.keep(key, flat[key], "training.precision")
            else:
                out.keep(key, flat[key], "-", "off: training.precision stays auto")


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


def import_save_steps(flat: dict[str, Any], value: Any, out: Migration) -> None:
    """`save_steps` as a checkpoint cadence in updates (a fraction of the run is not carried)."""
    if isinstance(value, int) and value >= 1:
        put(out.recipe, "checkpointing.every", value)
        put(out.recipe, "checkpointing.unit", "steps")
        out.keep("save_steps", value, "checkpointing.every", "unit: steps")
    else:
        out.warn("save_steps", value, "a fraction of the run: set checkpointing.every in samples or steps")


# ----------------------------------------------------------------------------------------------------
# GRPO -> PPO and back, on our schema
# ----------------------------------------------------------------------------------------------------


def convert(source: dict[str, Any], source_algorithm: str, target: str, out: Migration) -> None:
    """The recipe as one for `target`, into `out` with a row for each setting of the source's section."""
    recipe = copy.deepcopy(source)
    recipe["algorithm"] = target
    section = convert_section(recipe, ALGORITHMS[source_algorithm], ALGORITHMS[target], out)
    for key, value, note in ALGORITHMS[target].complete_migration(recipe, section):
        out.keep("(added)", value, f"{target}.{key}", note)
    recipe[target] = section
    out.recipe = recipe


def convert_section(
    recipe: dict[str, Any], source: Algorithm, target: Algorithm, out: Migration
) -> dict[str, Any]:
    """Pop the source algorithm's section and return it as the target's: settings both have under other
    names renamed (the source's TRL defaults carried where the target's differ), keys both take kept,
    the rest warned about."""
    section = recipe.pop(source.NAME, {}) or {}
    fields = target.section_fields()
    renames = {
        mine.key: (target.COUNTERPARTS[shared].key, rename_note(mine, target.COUNTERPARTS[shared]))
        for shared, mine in source.COUNTERPARTS.items()
        if shared in target.COUNTERPARTS
    }
    defaults = {
        mine.key: mine.default
        for shared, mine in source.COUNTERPARTS.items()
        if mine.default is not None
        and shared in target.COUNTERPARTS
        and mine.key != target.COUNTERPARTS[shared].key
    }
    missing = target.missing_counterparts(recipe | {source.NAME: section})
    converted: dict[str, Any] = {}
    for key, value in {**defaults, **section}.items():
        origin = f"{source.NAME}.{key}" if key in section else f"{source.NAME}.{key} (TRL default)"
        if key in renames:
            name, note = renames[key]
            converted[name] = value
            out.keep(origin, value, f"{target.NAME}.{name}", note)
        elif key in missing or (key not in fields and key.startswith("vllm_")):
            why = missing.get(key, f"no vLLM in llm_rl's {target.NAME.upper()}")
            out.warn(origin, value, f"no {target.NAME.upper()} counterpart: {why}")
        elif key in fields:
            converted[key] = value
            out.keep(origin, value, f"{target.NAME}.{key}")
        else:
            out.warn(origin, value, f"no {target.NAME.upper()} counterpart")
    return converted


def rename_note(mine: Counterpart, theirs: Counterpart) -> str:
    """What a renamed setting means on both sides."""
    if mine.meaning == theirs.meaning:
        return mine.meaning
    return f"{mine.meaning}; {theirs.meaning}: same value, another place"


def rename_run(recipe: dict[str, Any], source_algorithm: str, target: str, out: Migration) -> None:
    """A new run name and folder, so the migrated run never resumes from the source run's checkpoints."""
    for key in ("run.name", "run.output_dir"):
        value = get(recipe, key)
        if not isinstance(value, str):
            continue
        renamed = (
            value.replace(source_algorithm, target) if source_algorithm in value else f"{value}-{target}"
        )
        put(recipe, key, renamed)
        out.keep(key, value, key, f"now {renamed!r}: a new folder, so it never resumes the source run")


def account_for_kept_keys(source: dict[str, Any], out: Migration) -> None:
    """A row for every source key the conversion carried unchanged."""
    for dotted, value in leaves(source):
        if dotted.split(".")[0] in (*ALGORITHMS, "algorithm") or dotted in ("run.name", "run.output_dir"):
            continue
        out.keep(dotted, value, dotted, "kept")


def migrate(path: Path, target: str, warm_start: str | None = None) -> Migration:
    """Convert the recipe at `path` to `target` (an algorithm's name), checked against our schema."""
    if target not in ALGORITHMS:
        raise RecipeError(f"--to: input should be {known_names()}, got {target!r}")
    raw, flat = read_source(path)
    imported = import_flat(raw) if flat else None
    source = imported.recipe if imported else raw
    validate_recipe(copy.deepcopy(source), where=f"{path} (imported)" if flat else str(path))
    source_algorithm = source.get("algorithm", "grpo")
    out = Migration({})
    if not flat:
        out.keep("algorithm", source_algorithm, "algorithm", f"now {target}")
        account_for_kept_keys(source, out)
    if source_algorithm == target:
        out.recipe = copy.deepcopy(source)
    else:
        convert(source, source_algorithm, target, out)
        rename_run(out.recipe, source_algorithm, target, out)
    if imported:
        out.rows = chain_rows(imported.rows, out.rows)
    if warm_start is not None:
        out.keep(
            "(added)", warm_start, "model.policy", f"warm start; was {get(out.recipe, 'model.policy')!r}"
        )
        put(out.recipe, "model.policy", warm_start)
    validate_recipe(copy.deepcopy(out.recipe), where=f"{path} migrated to {target}")
    return out


def chain_rows(imported: list[KeyFate], converted: list[KeyFate]) -> list[KeyFate]:
    """One row per flat source key: where the import put it, followed through the conversion."""
    pending = list(converted)
    chained = []
    for row in imported:
        then = next((c for c in pending if c.source == row.target), None)
        if then is None:
            chained.append(row)
            continue
        pending.remove(then)
        note = "; ".join(part for part in (row.note, then.note) if part)
        chained.append(KeyFate(row.source, row.value, then.target, note, row.warning or then.warning))
    return chained + pending


def in_schema_order(recipe: dict[str, Any]) -> dict[str, Any]:
    """The recipe's sections in the order the schema lists them (algorithm first)."""
    order = list(Recipe.model_fields)
    return dict(
        sorted(recipe.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    )


def write_recipe(migration: Migration, source: Path, output: Path, target: str) -> None:
    """The migrated recipe as YAML, with a header naming its source and its warnings."""
    header = [
        f"# Migrated from {source} to {target} by `llm-rl migrate`.",
        f"# {len(migration.warnings)} source settings had no {target.upper()} counterpart (see the table it printed).",
    ]
    body = yaml.safe_dump(in_schema_order(migration.recipe), sort_keys=False, allow_unicode=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text("\n".join(header) + "\n" + body)
    partial.replace(output)

"""A TRL launch command (a shell file) as the flat TRL-style mapping `llm-rl migrate` imports, with a
row for everything around the script's flags: the launcher and its config, the environment, and each
variable the file leaves unset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llm_rl.errors import RecipeError
from llm_rl.recipe.accounting import KeyFate
from llm_rl.recipe.launch_command import LaunchCommand, field_types, read_launch_file, typed_flags

SHELL_SUFFIXES = {".sh", ".bash", ".zsh", ".cmd", ".txt"}
# Flags only TRL's PPO scripts take (PPOConfig's own and the scripts' model paths).
PPO_FLAGS = {
    "sft_model_path", "reward_model_path", "total_episodes", "num_ppo_epochs", "response_length",
    "missing_eos_penalty", "non_eos_penalty", "local_rollout_forward_batch_size", "vf_coef",
    "cliprange_value", "whiten_rewards", "kl_estimator", "stop_token", "num_sample_generations",
}  # fmt: skip
# The step()-API PPOConfig of trl 0.11 and before.
LEGACY_PPO_FLAGS = {"model_name", "steps", "ppo_epochs", "init_kl_coef", "adap_kl_ctrl", "query_dataset"}

LAUNCHER_NOTES = {
    "config_file": "launch the recipe with the same accelerate config: accelerate launch --config_file {value} "
    "recipes/<algorithm>.py --config RECIPE",
    "num_processes": "the number of processes is the launcher's: accelerate launch --num_processes {value}",
    "nproc_per_node": "the number of processes is the launcher's: accelerate launch --num_processes {value}",
    "num_gpus": "the number of processes is the launcher's: accelerate launch --num_processes {value}",
}
LAUNCHER_NOTE = (
    "a flag of the launcher, not of the run: give it to `accelerate launch` in front of the recipe"
)


def is_launch_file(path: Path) -> bool:
    """Whether `path` holds shell commands rather than a YAML or JSON mapping."""
    if path.suffix.lower() in SHELL_SUFFIXES:
        return True
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if text.startswith("#!"):
        return True
    try:
        return not isinstance(yaml.safe_load(text), dict)
    except yaml.YAMLError:
        return True


def import_launch(path: Path, command: int | None) -> tuple[dict[str, Any], list[KeyFate]]:
    """The flags of the launch command in `path` as a flat TRL-style mapping, and the rows for what
    surrounds them."""
    launch = read_launch_file(path, command)
    check_algorithm(launch, path)
    flat = typed_flags(launch.flags, trl_field_types())
    rows = [
        KeyFate("(script)", launch.script, "-", f"{launch.summary()}, its flags read as TRL's GRPO script's")
    ]
    rows += [KeyFate("(shell)", launch.script, "-", note, warning=True) for note in launch.notes]
    rows += launcher_rows(launch)
    rows += [
        KeyFate(
            f"${name}",
            "${" + name + "}",
            "-",
            f"not set in {path.name}: the recipe holds the placeholder ${{{name}}} where it was used; replace it",
            warning=True,
        )
        for name in launch.unresolved
    ]
    return flat, rows


def check_algorithm(launch: LaunchCommand, path: Path) -> None:
    """Only GRPO-style launches are read: a PPO launch says so, with what it would need."""
    legacy = sorted(LEGACY_PPO_FLAGS & set(launch.flags))
    if legacy:
        raise RecipeError(
            f"{launch.summary()} uses the step()-API PPOConfig of trl 0.11 and before ({', '.join(legacy)}): "
            "write its settings as a ppo: section of a recipe (docs/migration.md)",
            where=path,
        )
    ppo = sorted(PPO_FLAGS & set(launch.flags))
    if ppo or "ppo" in Path(launch.script).stem.lower():
        shown = f" ({', '.join(ppo)})" if ppo else ""
        raise RecipeError(
            f"{launch.summary()} runs TRL's PPOTrainer{shown}: migrate reads GRPO launch commands; write a PPO "
            "run as a recipe (recipes/arithmetic/ppo.yaml is one to start from)",
            where=path,
        )


def trl_field_types() -> dict[str, Any]:
    """The types of TRL's GRPO script arguments (`trl/scripts/grpo.py`: its script arguments, ModelConfig
    and GRPOConfig)."""
    from trl import GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    return field_types(GRPOScriptArguments, ModelConfig, GRPOConfig)


def launcher_rows(launch: LaunchCommand) -> list[KeyFate]:
    """A row for each launcher flag and each variable the command runs with."""
    rows = [
        KeyFate(
            f"({launch.launcher}) --{name}",
            value,
            "-",
            LAUNCHER_NOTES.get(name, LAUNCHER_NOTE).format(value=value),
        )
        for name, value in launch.launcher_flags.items()
    ]
    rows += [
        KeyFate(
            f"(environment) {name}",
            value,
            "-",
            "set it in the environment of the llm_rl launch as well; it is not a recipe key",
        )
        for name, value in launch.environment.items()
    ]
    return rows

"""A TRL launch command (a shell file) as the flat TRL-style mapping `llm-rl migrate` imports, with a
row for everything around the script's flags: the launcher and its config, the environment, and each
variable the file leaves unset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llm_rl.recipe.accounting import KeyFate
from llm_rl.recipe.launch_command import LaunchCommand, field_types, read_launch_file, typed_flags
from llm_rl.recipe.trl_import.ppo_keys import is_trl_ppo, trl_ppo_field_types

SHELL_SUFFIXES = {".sh", ".bash", ".zsh", ".cmd", ".txt"}

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


def import_launch(path: Path, command: int | None) -> tuple[dict[str, Any], list[KeyFate], LaunchCommand]:
    """The flags of the launch command in `path` as a flat TRL-style mapping (typed as TRL's GRPO or
    PPO script reads them), the rows for what surrounds them, and the command."""
    launch = read_launch_file(path, command)
    ppo = is_trl_ppo(launch.flags, launch.script)
    flat = typed_flags(launch.flags, trl_ppo_field_types() if ppo else trl_field_types())
    kind = "TRL's PPO script's" if ppo else "TRL's GRPO script's"
    rows = [KeyFate("(script)", launch.script, "-", f"{launch.summary()}, its flags read as {kind}")]
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
    return flat, rows, launch


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

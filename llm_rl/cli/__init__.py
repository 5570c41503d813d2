"""The command line: `llm-rl train|validate|plan|rollback|migrate|compare|doctor|export|sample|serve`, and the
`recipes/<algorithm>.py` entry points.

`parser.py` holds each sub-command's flags, `commands.py` and `serve.py` what each does, and
`exit_codes.py` the documented exit codes and the guard that turns errors into them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from llm_rl.cli.commands import command_train, command_train_reward_model
from llm_rl.cli.exit_codes import guarded
from llm_rl.cli.parser import add_recipe_arguments, build_parser

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(argv: Sequence[str] | None = None) -> int:
    """`llm-rl COMMAND ...`."""
    args = build_parser().parse_args(argv)
    return guarded(args.run, args)


def reward_entry_point(default_config: Path, argv: Sequence[str] | None = None) -> int:
    """`reward_models/train.py [--config CONFIG] [--set k=v ...]`."""
    parser = argparse.ArgumentParser(
        prog="reward_models/train.py",
        description="Train a reward model with TRL's RewardTrainer; with no --config, the embedded default.",
    )
    add_recipe_arguments(parser, recipe_positional=False)
    args = parser.parse_args(argv)
    args.recipe = args.recipe or default_config
    return guarded(command_train_reward_model, args)


def entry_point(algorithm: str, default_recipe: Path, argv: Sequence[str] | None = None) -> int:
    """`recipes/<algorithm>.py [--config RECIPE] [--set k=v ...]`: the script decides the algorithm."""
    parser = argparse.ArgumentParser(
        prog=f"recipes/{algorithm}.py",
        description=f"Train with {algorithm.upper()}; with no --config, the embedded default recipe.",
    )
    add_recipe_arguments(parser, recipe_positional=False)
    args = parser.parse_args(argv)
    args.recipe = args.recipe or default_recipe
    args.overrides = [f"algorithm={algorithm}", *args.overrides]
    return guarded(command_train, args)

"""TRL launch commands read out of the shell scripts teams keep them in.

A TRL run is usually a command, not a config file: `accelerate launch --config_file zero3.yaml
examples/scripts/ppo/ppo.py --sft_model_path ... --kl_coef 0.05`, kept in a `.sh` file with exports,
line continuations, comments, `$VARS` and `| tee log` around it. `read_launch_file` finds each command
that runs a Python script (through `python`, `accelerate launch`, `torchrun` or `deepspeed`) and reads
its flags the way `HfArgumentParser` would, without running anything: variables the file assigns are
substituted, and any other `$VAR` stays as a `${VAR}` placeholder that is reported, never an empty string.

`shell_script.py` splits the text into commands and words, `launch_flags.py` reads a launch's words as
flags; here, which commands are launches, and the flags' values typed as the script's dataclasses type them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_rl.errors import RecipeError
from llm_rl.recipe.launch_flags import python_module, script_flags, split_at_script
from llm_rl.recipe.shell_script import assigned, leading_assignments, shell_commands, substitute

# Programs that run a training script, and the Python modules that do it through `python -m`.
LAUNCHERS = {"accelerate", "torchrun", "deepspeed"}
LAUNCHER_MODULES = {"accelerate.commands.launch", "torch.distributed.run", "torch.distributed.launch"}


@dataclass
class LaunchCommand:
    """One command that runs a Python training script, its flags read as `HfArgumentParser` reads them."""

    line: int
    script: str
    # `python`, `accelerate launch`, `torchrun`, `deepspeed` or `python -m <launcher module>`.
    launcher: str
    # The launcher's own flags (`--config_file`, `--num_processes`, ...), without their dashes.
    launcher_flags: dict[str, Any] = field(default_factory=dict)
    # The script's flags: a value, a list of values (`--report_to wandb tensorboard`), or True for a bare
    # flag (`--use_peft`). Values stay text: the importer reads them against the config's field types.
    flags: dict[str, Any] = field(default_factory=dict)
    # Variables the command uses that the file does not set, left as `${NAME}` in the values.
    unresolved: list[str] = field(default_factory=list)
    # Variables the file sets before the command (`export CUDA_VISIBLE_DEVICES=0,1`), by name.
    environment: dict[str, str] = field(default_factory=dict)
    # What was read differently from the shell, and why (a lost line continuation).
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"line {self.line}: {self.launcher} {self.script}"


def read_launch_file(path: Path, command: int | None = None) -> LaunchCommand:
    """The launch command in a shell file: the only one, or the `command`-th (from 1) when it has several."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RecipeError(f"cannot read the launch file: {err}", where=path) from None
    commands = launch_commands(text, path)
    if not commands:
        raise RecipeError(
            "no command in this file runs a Python script (python, accelerate launch, torchrun or deepspeed)",
            where=path,
        )
    if command is None:
        if len(commands) > 1:
            listed = "; ".join(f"{number}: {c.summary()}" for number, c in enumerate(commands, 1))
            raise RecipeError(
                f"this file holds {len(commands)} launch commands ({listed}): choose one with --command N",
                where=path,
            )
        return commands[0]
    if not 1 <= command <= len(commands):
        raise RecipeError(
            f"--command {command}: this file holds {len(commands)} launch command(s)", where=path
        )
    return commands[command - 1]


def launch_commands(text: str, where: Path | str = "<command>") -> list[LaunchCommand]:
    """Every command in a shell text that runs a Python script, in order."""
    variables: dict[str, str] = {}
    exported: dict[str, str] = {}
    commands: list[LaunchCommand] = []
    previous_was_launch = False
    for line, words in shell_commands(text, where):
        environment, words = leading_assignments(words, variables)
        if words and words[0].startswith("--") and previous_was_launch:
            note_unpassed_flags(commands[-1], line, words, variables)
            continue
        launch = None
        if words[:1] == ["export"]:
            for name, value in (assigned(word, variables) for word in words[1:]):
                variables[name] = exported[name] = value
        elif not words:  # a plain assignment: NAME=value
            variables.update(environment)
        else:
            launch = as_launch(line, words, variables)
        if launch is not None:
            launch.environment = {**exported, **environment}
            commands.append(launch)
        previous_was_launch = launch is not None
    return commands


def note_unpassed_flags(
    launch: LaunchCommand, line: int, words: list[str], variables: dict[str, str]
) -> None:
    """Flags on a line of their own right after a launch: the line before has no `\\` (TRL's own
    docstrings have this slip), or a comment line ended the command. The shell ran the launch without
    them, so they are not read; the launch says so, for the reader to decide."""
    flags = script_flags([substitute(word, variables, []) for word in words])
    launch.notes.append(
        f"line {line} holds flags ({', '.join(flags)}) that the shell did not pass to the command on line "
        f"{launch.line}: the line before it has no line-continuation backslash, or a comment ended the "
        "command. They are not read; if the run had them, set them in the recipe"
    )


def as_launch(line: int, words: list[str], variables: dict[str, str]) -> LaunchCommand | None:
    """The command as a launch of a Python script, or None when it runs none."""
    unresolved: list[str] = []
    words = [substitute(word, variables, unresolved) for word in words]
    program = Path(words[0]).name
    if program in LAUNCHERS:
        rest = words[2:] if program == "accelerate" and words[1:2] == ["launch"] else words[1:]
        if program == "accelerate" and words[1:2] != ["launch"]:
            return None
        launcher = "accelerate launch" if program == "accelerate" else program
    elif re.fullmatch(r"python[0-9.]*", program):
        rest, launcher = words[1:], "python"
        module = python_module(rest)
        if module is not None:
            if module not in LAUNCHER_MODULES:
                return None
            rest = rest[rest.index("-m") + 2 :]
            launcher = f"python -m {module}"
    else:
        return None
    launcher_flags, script, script_words = split_at_script(rest)
    if script is None:
        return None
    return LaunchCommand(
        line=line,
        script=script,
        launcher=launcher,
        launcher_flags=launcher_flags,
        flags=script_flags(script_words),
        unresolved=unresolved,
    )


# ----------------------------------------------------------------------------------------------------
# Flag values as the script's argument dataclasses would type them
# ----------------------------------------------------------------------------------------------------

TRUE_WORDS = {"true", "yes", "y", "1"}
FALSE_WORDS = {"false", "no", "n", "0"}


def field_types(*classes: type) -> dict[str, Any]:
    """Each dataclass field's type, `None` and `Optional` removed: what `HfArgumentParser` parses as."""
    types: dict[str, Any] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            types[item.name] = without_none(hints.get(item.name, str))
    return types


def without_none(annotation: Any) -> Any:
    """`X | None` and `Optional[X]` as X; other unions stay."""
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(arguments) == 1:
        return arguments[0]
    return annotation


def typed_flags(flags: dict[str, Any], types: dict[str, Any]) -> dict[str, Any]:
    """The flags with values of their fields' types (text stays text where the field is text or
    unknown), and `--no_NAME` as `NAME: false` for a boolean field."""
    typed: dict[str, Any] = {}
    for name, value in flags.items():
        if name.startswith("no_") and name not in types and types.get(name[3:]) is bool and value is True:
            typed[name[3:]] = False
            continue
        typed[name] = typed_value(value, types.get(name))
    return typed


def typed_value(value: Any, annotation: Any) -> Any:
    """One flag's value as `annotation` reads it; unknown annotations read numbers and true/false."""
    if isinstance(value, list):
        inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else None
        return [typed_value(item, inner) for item in value]
    if not isinstance(value, str) or "${" in value:
        return value
    if typing.get_origin(annotation) is list:
        return [typed_value(value, typing.get_args(annotation)[0])]
    word = value.lower()
    if annotation is bool and word in TRUE_WORDS | FALSE_WORDS:
        return word in TRUE_WORDS
    if annotation is None and word in {"true", "false"}:
        return word == "true"
    # An integer literal stays an int for a float field too (`--save_steps 50`), as YAML reads it.
    for number in {int: (int,), float: (int, float), None: (int, float)}.get(annotation, ()):
        try:
            return number(value)
        except ValueError:
            continue
    if annotation is dict:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value

"""A launch's words read as flags: the launcher's own up to the script, then the script's, as
`HfArgumentParser` reads them (values stay text)."""

from __future__ import annotations

from typing import Any

# Flags of the launchers themselves that take no value (everything else takes one).
LAUNCHER_SWITCHES = {
    "--multi_gpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm", "--cpu", "--debug", "-m",
    "--module", "--no_python", "--standalone", "--quiet", "-q", "--tpu", "--same_network", "--no-python",
}  # fmt: skip


def python_module(words: list[str]) -> str | None:
    """The module of `python [options] -m module`, or None when python runs a file."""
    for index, word in enumerate(words):
        if word == "-m" and index + 1 < len(words):
            return words[index + 1]
        if not word.startswith("-"):
            return None
    return None


def split_at_script(words: list[str]) -> tuple[dict[str, Any], str | None, list[str]]:
    """(the launcher's flags, the script, the script's words): the script is the first word ending in .py."""
    flags: dict[str, Any] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if word.endswith(".py") and not word.startswith("-"):
            return flags, word, words[index + 1 :]
        if word.startswith("-"):
            name, has_value, value = word.lstrip("-").partition("=")
            if has_value:
                flags[name] = value
            elif word in LAUNCHER_SWITCHES or index + 1 >= len(words) or takes_no_value(words[index + 1]):
                flags[name] = True
            else:
                flags[name] = words[index + 1]
                index += 1
        index += 1
    return flags, None, []


def takes_no_value(following: str) -> bool:
    """A launcher flag followed by another flag or by the script (`python -i train.py`) is a switch."""
    return following.startswith("-") or following.endswith(".py")


def script_flags(words: list[str]) -> dict[str, Any]:
    """`--name value`, `--name=value`, `--name v1 v2` (a list) and bare `--name` (True), as
    `HfArgumentParser` reads them; a repeated flag keeps its last value, as argparse does."""
    flags: dict[str, Any] = {}
    name: str | None = None
    for word in words:
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            flags[name] = value if has_value else True
            if has_value:
                name = None
        elif name is not None:
            current = flags[name]
            flags[name] = word if current is True else [*as_list(current), word]
        else:
            flags.setdefault("(positional)", []).append(word)
    return flags


def as_list(value: Any) -> list[Any]:
    """A flag's value as a list, for a flag followed by several words (`--report_to wandb tensorboard`)."""
    return value if isinstance(value, list) else [value]

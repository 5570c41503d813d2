"""Shell text read as the shell would split it, without running it: commands, words and variables.

Line continuations are joined, comments and redirections dropped, commands split at `;`, `&&`, `||` and
`&` and cut at a pipe; `$VAR`, `${VAR}` and `${VAR:-default}` are substituted from the variables the text
assigns, and any other stays a `${VAR}` placeholder, listed, never an empty string.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from llm_rl.errors import RecipeError

# Shell words that separate commands; what follows a pipe (`| tee log`) is not part of the run.
SEPARATORS = {";", "&&", "||", "&"}
PIPES = {"|", "|&"}
# `2>&1`, `> log.txt`, `>>out.log`, `< input`: dropped before the words are split (a `>` inside a quoted
# value would be taken for one; launch commands do not quote such values).
REDIRECTION = re.compile(r"(?<!\S)\d*(?:>>?|<)(?:&\d+|&-|\s*[^\s;&|<>]+)")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*|\d+)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*|\d))")


def shell_commands(text: str, where: Path | str) -> list[tuple[int, list[str]]]:
    """(first line, words) for each simple command of the text: continuations joined, comments and
    redirections dropped, split at `;`, `&&`, `||` and `&`, and cut at a pipe (`| tee log`)."""
    commands = []
    for start, line in logical_lines(text):
        lexer = shlex.shlex(REDIRECTION.sub(" ", line), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        piped = False
        try:
            for word in lexer:
                if word in SEPARATORS:
                    if words:
                        commands.append((start, words))
                    words, piped = [], False
                elif word in PIPES:
                    piped = True
                elif not piped:
                    words.append(word)
        except ValueError as err:  # an unclosed quote
            raise RecipeError(f"line {start}: cannot read the shell text: {err}", where=where) from None
        if words:
            commands.append((start, words))
    return commands


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each line with its backslash continuations joined. A comment line
    ends the command before it, as in the shell: its backslash is part of the comment."""
    lines: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 1
    for number, physical in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        if physical.lstrip().startswith("#"):
            if parts:
                lines.append((start, " ".join(parts)))
                parts = []
            continue
        stripped = physical.rstrip()
        if stripped.endswith("\\"):
            parts.append(stripped[:-1])
            continue
        parts.append(physical)
        lines.append((start, " ".join(parts)))
        parts = []
    if parts:
        lines.append((start, " ".join(parts)))
    return lines


def leading_assignments(words: list[str], variables: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """`NAME=value` words before a command (its environment), and the command's own words."""
    environment = {}
    while words and ASSIGNMENT.match(words[0]):
        name, value = assigned(words[0], variables)
        environment[name] = value
        words = words[1:]
    return environment, words


def assigned(word: str, variables: dict[str, str]) -> tuple[str, str]:
    """(name, value) of a `NAME=value` word, variables in the value substituted where known."""
    match = ASSIGNMENT.match(word)
    if match is None:
        return word, variables.get(word, "")
    return match.group(1), substitute(match.group(2), variables, [])


def substitute(word: str, variables: dict[str, str], unresolved: list[str]) -> str:
    """`$NAME`, `${NAME}` and `${NAME:-default}` replaced by known values; unknown ones stay `${NAME}`
    and are listed in `unresolved`."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        if name not in unresolved:
            unresolved.append(name)
        return "${" + name + "}"

    return VARIABLE.sub(value, word)

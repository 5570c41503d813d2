"""Errors that are the user's to fix: bad recipes, data, reward functions or model paths.

Every entry point turns a `UserInputError` into one line on stderr and exit code 2; anything else is a
failure while training (exit code 1), a `TrainingFailure` one that says in its own words what to do.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator


class UserInputError(Exception):
    """Bad input: the message names the file, key or row and says what is wrong."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class RecipeError(UserInputError):
    """A recipe that does not parse, has unknown keys, wrong types or conflicting settings."""


class DataError(UserInputError):
    """A dataset that is missing, empty, unreadable or lacks a column the recipe names."""


class RewardError(UserInputError):
    """A reward function that cannot be found, imported, built, or that returns bad values."""


class ModelError(UserInputError):
    """A model or tokenizer path that does not load."""


class CheckpointError(UserInputError):
    """A checkpoint whose files are missing, unreadable or do not fit the run (`where` names the file)."""


class TrainingFailure(Exception):
    """A failure while training whose message says what happened and what to do (exit code 1, no
    traceback unless `--debug`): a full disk, say."""


def causes(err: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or during, each once."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (library errors can run to pages)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def did_you_mean(name: str, options: Iterable[str], prefix: str = "", cutoff: float = 0.6) -> str:
    """` (did you mean 'x'?)` for the closest option, or "" when none is close; `prefix` goes before it."""
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=cutoff)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


def unknown_builtin(kind: str, name: str, known: Iterable[str]) -> str:
    """The message for an unknown `builtin:<name>` model or task, with the closest and all known names."""
    known = list(known)
    listed = ", ".join(f"builtin:{option}" for option in known)
    return f"unknown built-in {kind}{did_you_mean(name, known, prefix='builtin:')}; known: {listed}"

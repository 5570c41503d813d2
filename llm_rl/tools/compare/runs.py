"""Reading run folders for `llm-rl compare`: llm_rl's own (`metrics.jsonl`, `run_summary.json`,
`recipe.yaml`) and a TRL run's output folder.

A TRL run's output folder compares too: its `trainer_state.json` (or its newest checkpoint's) holds the
`log_history` TRL logged, one row per PPO update. Those rows are read under llm_rl's metric names (TRL's
PPO names, as `llm_rl.algorithms.ppo.algorithm.METRIC_NAMES` maps them; `episode` is `samples`, `eps`
is `samples_per_second`), so an old TRL run and its converted recipe plot on one axis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_rl.algorithms.ppo.algorithm import METRIC_NAMES as PPO_METRIC_NAMES
from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.errors import DataError
from llm_rl.run_folder import METRICS_FILE, RECIPE_FILE, SUMMARY_FILE, read_rows

# What a TRL run's output folder (or each of its checkpoints) holds: the Trainer's state and log history.
TRL_STATE_FILE = "trainer_state.json"
# TRL's names for what llm_rl rows call `samples` and `samples_per_second`.
TRL_ROW_NAMES = {**PPO_METRIC_NAMES, "episode": "samples", "eps": "samples_per_second"}


@dataclass
class Run:
    """One run folder as read from disk."""

    folder: Path
    name: str
    rows: list[dict[str, Any]]
    summary: dict[str, Any] | None
    algorithm: str | None
    # The file the rows came from, for the reasons a value is n/a.
    rows_file: str = METRICS_FILE


def read_json_file(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when there is none; a file that does not parse is bad input."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"not valid JSON: {err}", where=str(path)) from None


def run_recipe(folder: Path) -> dict[str, Any]:
    """The run's `recipe.yaml` as a mapping; empty when there is none."""
    path = folder / RECIPE_FILE
    recipe = yaml.safe_load(path.read_text()) if path.exists() else None
    return recipe if isinstance(recipe, dict) else {}


def algorithm_label(summary: dict[str, Any] | None, recipe: dict[str, Any]) -> str | None:
    """The run's algorithm, with what sets it apart from other runs of it (the algorithm's `variant`)."""
    name = (summary or {}).get("algorithm") or recipe.get("algorithm")
    algorithm = ALGORITHMS.get(name) if isinstance(name, str) else None
    variant = algorithm.variant(recipe) if algorithm is not None and recipe else None
    return f"{name} ({variant})" if variant else name


def load_run(folder: Path, name: str) -> Run:
    """Read a run folder, or a TRL run's output folder; one with none of metrics.jsonl, run_summary.json
    and a TRL trainer_state.json is bad input."""
    if not folder.is_dir():
        raise DataError("no such run folder", where=str(folder))
    if not (folder / METRICS_FILE).exists() and not (folder / SUMMARY_FILE).exists():
        state = trl_state_file(folder)
        if state is None:
            raise DataError(
                f"not a run folder: it holds neither {METRICS_FILE} nor {SUMMARY_FILE} (nor a TRL "
                f"{TRL_STATE_FILE})",
                where=str(folder),
            )
        return Run(folder, name, trl_rows(state), None, "ppo (TRL)", str(state.relative_to(folder)))
    try:
        rows = read_rows(folder)
    except json.JSONDecodeError as err:
        raise DataError(f"not JSON lines: {err}", where=str(folder / METRICS_FILE)) from None
    summary = read_json_file(folder / SUMMARY_FILE)
    return Run(folder, name, rows, summary, algorithm_label(summary, run_recipe(folder)))


def trl_state_file(folder: Path) -> Path | None:
    """A TRL output folder's trainer_state.json: its own, else the newest checkpoint's (TRL's PPOTrainer
    wrote its history only into checkpoints)."""
    if (folder / TRL_STATE_FILE).exists():
        return folder / TRL_STATE_FILE
    checkpoints = [
        path for path in folder.glob(f"checkpoint-*/{TRL_STATE_FILE}") if path.parent.name[11:].isdigit()
    ]
    return max(checkpoints, key=lambda path: int(path.parent.name[11:]), default=None)


def trl_rows(path: Path) -> list[dict[str, Any]]:
    """The PPO update rows of a TRL log history (those with an `episode` count), under llm_rl's names."""
    state = read_json_file(path)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise DataError("no log_history list: not a Trainer state", where=str(path))
    rows = [
        {TRL_ROW_NAMES.get(key, key): value for key, value in entry.items()}
        for entry in history
        if isinstance(entry, dict) and is_number(entry.get("episode"))
    ]
    if not rows:
        raise DataError(
            "its log_history has no PPO update rows (rows with an `episode` count, as TRL's PPOTrainer "
            "logged them)",
            where=str(path),
        )
    return rows


def run_names(folders: list[Path]) -> list[str]:
    """Each folder's name, or its whole path where two folders share a name."""
    names = [folder.name for folder in folders]
    return [folder.name if names.count(folder.name) == 1 else str(folder) for folder in folders]


def load_runs(folders: list[Path]) -> list[Run]:
    """Read every run folder, named for the table and the plot legends."""
    return [load_run(folder, name) for folder, name in zip(folders, run_names(folders), strict=True)]


def is_number(value: Any) -> bool:
    """A JSON number (bools are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool)

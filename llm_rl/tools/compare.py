"""Side-by-side comparison of run folders: `llm-rl compare RUN_DIR ... -o REPORT_DIR`.

Why: deciding between two recipes (GRPO or PPO, one learning rate or another) needs the same numbers,
measured the same way, for every run. This module reads each run folder (`metrics.jsonl`,
`run_summary.json`, `recipe.yaml`), draws one PNG per metric with every run overlaid against
`samples` (the held-out reward among them, when the runs evaluated), and writes `report.md` with the
plots and a table of one column per run.

Smoothing: RL rewards are noisy, so "best" and "start" use the smoothed reward: the mean of
`reward/mean` over a trailing window of 20% of the rows (at least one row). The smoothed curve starts
at the first full window, so its first and last points are the means of the first and last 20% of rows,
the same numbers `llm_rl.monitoring.metrics.first_and_last_mean` gives (and `scripts/learning_curve.py` prints).

"90% of the best reward" is 90% of the way from the start to the best: start + 0.9 * (best - start),
which also makes sense for negative rewards.

A TRL run's output folder compares too: its `trainer_state.json` (or its newest checkpoint's) holds the
`log_history` TRL logged, one row per PPO update. Those rows are read under llm_rl's metric names (TRL's
PPO names, as `llm_rl.algorithms.ppo.algorithm.METRIC_NAMES` maps them; `episode` is `samples`, `eps`
is `samples_per_second`), so an old TRL run and its converted recipe plot on one axis.

A value that cannot be computed (a key no row has, no `run_summary.json`, an empty `metrics.jsonl`,
a single row) shows as "n/a (<reason>)"; a folder that is not a run folder is bad input (`DataError`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_rl.algorithms.ppo.algorithm import METRIC_NAMES as PPO_METRIC_NAMES
from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.errors import DataError
from llm_rl.monitoring.metrics import first_and_last_mean
from llm_rl.run_folder import METRICS_FILE, RECIPE_FILE, SUMMARY_FILE, read_rows, write_atomic

REPORT_FILE = "report.md"
# What a TRL run's output folder (or each of its checkpoints) holds: the Trainer's state and log history.
TRL_STATE_FILE = "trainer_state.json"
# TRL's names for what llm_rl rows call `samples` and `samples_per_second`.
TRL_ROW_NAMES = {**PPO_METRIC_NAMES, "episode": "samples", "eps": "samples_per_second"}
# The fraction of rows the smoothing window, the start and the end (and the reward spread) cover.
TAIL_FRACTION = 0.2
# Of the way from the smoothed start to the smoothed best.
TARGET_FRACTION = 0.9
REWARD = "reward/mean"
# The held-out reward (`evaluation.every`, `evaluation.at_start`): greedy, on the same prompts each time.
EVAL_REWARD = "eval/reward/mean"

# metric key, PNG file name, axis label
PLOTS = (
    (REWARD, "reward.png", "reward (mean)"),
    (EVAL_REWARD, "eval_reward.png", "held-out reward (mean)"),
    ("kl", "kl.png", "KL"),
    ("grad_norm", "grad_norm.png", "gradient norm"),
    ("samples_per_second", "samples_per_second.png", "samples per second"),
)


class Unavailable(Exception):
    """A table value that cannot be computed; the message is the reason shown as "n/a (reason)"."""


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


# --------------------------------------------------------------------------------------------------
# Reading run folders
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Numbers from the rows
# --------------------------------------------------------------------------------------------------


def is_number(value: Any) -> bool:
    """A JSON number (bools are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def points(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    """(samples, value) for every row where both are numbers."""
    return [
        (row["samples"], row[key])
        for row in rows
        if is_number(row.get("samples")) and is_number(row.get(key))
    ]


def values(run: Run, key: str, at_least: int = 1) -> list[float]:
    """The numeric values of `key` in row order; Unavailable with the reason when too few."""
    if not run.rows:
        raise Unavailable(
            f"empty {run.rows_file}" if (run.folder / run.rows_file).exists() else f"no {run.rows_file}"
        )
    found = [row[key] for row in run.rows if is_number(row.get(key))]
    if not found:
        raise Unavailable(f"no {key} in {run.rows_file}")
    if len(found) < at_least:
        raise Unavailable(
            f"a single row with {key}" if len(found) == 1 else f"only {len(found)} rows with {key}"
        )
    return found


def tail_window(count: int) -> int:
    """How many rows `TAIL_FRACTION` of `count` rows is (at least one), as in `first_and_last_mean`."""
    return max(1, round(count * TAIL_FRACTION))


def smoothed_reward(run: Run) -> list[tuple[float, float]]:
    """(samples, trailing mean of reward/mean over `tail_window` rows), from the first full window on."""
    curve = points(run.rows, REWARD)
    if len(curve) < 2:
        values(run, REWARD, at_least=2)  # raises with the reason: an empty file, no reward, a single row
        raise Unavailable(f"fewer than 2 rows with both samples and {REWARD}")
    window = tail_window(len(curve))
    rewards = [reward for _, reward in curve]
    return [
        (curve[end][0], statistics.fmean(rewards[end + 1 - window : end + 1]))
        for end in range(window - 1, len(curve))
    ]


def summary_value(run: Run, key: str) -> Any:
    """A key of run_summary.json; Unavailable when the file or the key is missing."""
    if run.summary is None:
        raise Unavailable(f"no {SUMMARY_FILE}")
    if run.summary.get(key) is None:
        raise Unavailable(f"no {key} in {SUMMARY_FILE}")
    return run.summary[key]


def total_samples(run: Run) -> int:
    """Samples the run consumed: run_summary.json's count, else the last metrics row's."""
    try:
        return int(summary_value(run, "samples"))
    except Unavailable:
        return int(values(run, "samples")[-1])


def samples_to_target(run: Run) -> int:
    """Samples at the first smoothed point at or past start + 90% of (best - start)."""
    curve = smoothed_reward(run)
    start, best = curve[0][1], max(reward for _, reward in curve)
    if best <= start:
        raise Unavailable("the smoothed reward never rose above its start")
    target = start + TARGET_FRACTION * (best - start)
    return int(next(samples for samples, reward in curve if reward >= target))


def reward_per_1000_samples(run: Run) -> float:
    """(last smoothed - first smoothed reward) / samples * 1000."""
    values(run, REWARD, at_least=2)  # raises with the reason when there are too few rows
    first, last = first_and_last_mean(run.rows, REWARD, TAIL_FRACTION)
    samples = total_samples(run)
    if samples <= 0:
        raise Unavailable("no samples")
    return (last - first) / samples * 1000


def held_out_gain(run: Run) -> float:
    """The last held-out reward minus the first: what training did to greedy reward on unseen prompts."""
    held_out = values(run, EVAL_REWARD, at_least=2)
    return held_out[-1] - held_out[0]


def reward_spread(run: Run) -> float:
    """Population std of reward/mean over the last 20% of rows (at least two rows)."""
    rewards = values(run, REWARD, at_least=2)
    return statistics.pstdev(rewards[-max(2, tail_window(len(rewards))) :])


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------


def cell(compute: Callable[[], Any], form: str = "{}") -> str:
    """A formatted value, or "n/a (<reason>)" when it cannot be computed."""
    try:
        return form.format(compute())
    except Unavailable as missing:
        return f"n/a ({missing})"


def table_rows(run: Run) -> dict[str, str]:
    """One run's column of the table: row label -> formatted value."""
    spread_label = f"reward spread, last {TAIL_FRACTION:.0%} of rows (std)"
    return {
        "algorithm": run.algorithm or "n/a (no run_summary.json or recipe.yaml)",
        "status": cell(lambda: summary_value(run, "status")),
        "samples": cell(lambda: total_samples(run)),
        f"samples to {TARGET_FRACTION:.0%} of best smoothed reward": cell(lambda: samples_to_target(run)),
        "reward gained per 1,000 samples": cell(lambda: reward_per_1000_samples(run), "{:+.4f}"),
        "samples/s (mean)": cell(lambda: statistics.fmean(values(run, "samples_per_second")), "{:.1f}"),
        "peak memory (MB)": cell(lambda: max(values(run, "peak_memory_mb")), "{:.1f}"),
        "held-out reward, first evaluation": cell(lambda: values(run, EVAL_REWARD)[0], "{:.4f}"),
        "held-out reward, last evaluation": cell(lambda: values(run, EVAL_REWARD)[-1], "{:.4f}"),
        "held-out reward gain (last - first)": cell(lambda: held_out_gain(run), "{:+.4f}"),
        "best reward": cell(lambda: max(values(run, REWARD)), "{:.4f}"),
        "final reward": cell(lambda: values(run, REWARD)[-1], "{:.4f}"),
        "KL at the end": cell(lambda: values(run, "kl")[-1], "{:.4g}"),
        spread_label: cell(lambda: reward_spread(run), "{:.4f}"),
    }


def markdown_table(runs: list[Run]) -> str:
    """The comparison table in Markdown: a row per measure, a column per run."""
    columns = [table_rows(run) for run in runs]
    lines = [
        "| | " + " | ".join(run.name for run in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for label in columns[0]:
        lines.append(f"| {label} | " + " | ".join(column[label] for column in columns) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Plots and the report
# --------------------------------------------------------------------------------------------------


def plot_metric(runs: list[Run], key: str, label: str, path: Path) -> str:
    """Draw `key` against samples for every run that has it; returns the report's line for the plot."""
    series = [(run, points(run.rows, key)) for run in runs]
    drawn = [(run, curve) for run, curve in series if curve]
    if not drawn:
        return f"- {label}: no plot, no run logs `{key}`.\n"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for run, curve in drawn:
        samples, metric = zip(*curve, strict=True)
        axes.plot(
            samples,
            metric,
            marker="o",
            markersize=3,
            label=f"{run.name} ({run.algorithm or 'unknown algorithm'})",
        )
    axes.set_xlabel("samples (prompt-completion pairs)")
    axes.set_ylabel(label)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    partial = path.with_name(f".{path.name}.partial")
    figure.savefig(partial, format="png", dpi=100)
    plt.close(figure)
    partial.replace(path)
    missing = [run.name for run, curve in series if not curve]
    note = f" (not logged by: {', '.join(missing)})" if missing else ""
    return f"![{label}]({path.name}){note}\n"


def compare_runs(folders: list[Path], report_dir: Path) -> tuple[str, Path]:
    """Read the run folders, write the plots and report.md; returns the table and report.md's path."""
    runs = load_runs(folders)
    report_dir.mkdir(parents=True, exist_ok=True)
    plot_lines = [plot_metric(runs, key, label, report_dir / name) for key, name, label in PLOTS]
    table = markdown_table(runs)
    runs_list = "".join(f"- {run.name}: `{run.folder}`\n" for run in runs)
    report = (
        "# Run comparison\n\n"
        f"{runs_list}\n"
        f"{table}\n"
        f"Smoothed reward: the mean of `{REWARD}` over a trailing window of {TAIL_FRACTION:.0%} of the rows "
        f"(at least one). Samples to {TARGET_FRACTION:.0%}: the first point where the smoothed reward "
        f"reaches start + {TARGET_FRACTION} x (best - start). Reward gained per 1,000 samples: (mean of the "
        f"last {TAIL_FRACTION:.0%} of rows - mean of the first {TAIL_FRACTION:.0%}) / samples x 1000.\n\n"
        "## Plots (against samples)\n\n" + "\n".join(plot_lines)
    )
    path = report_dir / REPORT_FILE
    # report.md last, whole or not at all: a crash never leaves half a report.
    write_atomic(path, report)
    return table, path

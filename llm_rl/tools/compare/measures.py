"""The measures of `llm-rl compare`'s table, each computed the same way for every run, and the table.

Smoothing: RL rewards are noisy, so "best" and "start" use the smoothed reward: the mean of
`reward/mean` over a trailing window of 20% of the rows (at least one row). The smoothed curve starts
at the first full window, so its first and last points are the means of the first and last 20% of rows,
the same numbers `llm_rl.monitoring.metrics.first_and_last_mean` gives (and `scripts/learning_curve.py` prints).

"90% of the best reward" is 90% of the way from the start to the best: start + 0.9 * (best - start),
which also makes sense for negative rewards.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from llm_rl.monitoring.metrics import first_and_last_mean
from llm_rl.run_folder import SUMMARY_FILE
from llm_rl.tools.compare.runs import Run, is_number

# The fraction of rows the smoothing window, the start and the end (and the reward spread) cover.
TAIL_FRACTION = 0.2
# Of the way from the smoothed start to the smoothed best.
TARGET_FRACTION = 0.9
REWARD = "reward/mean"
# The held-out reward (`evaluation.every`, `evaluation.at_start`): greedy, on the same prompts each time.
EVAL_REWARD = "eval/reward/mean"


class Unavailable(Exception):
    """A table value that cannot be computed; the message is the reason shown as "n/a (reason)"."""


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

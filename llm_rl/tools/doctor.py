"""`llm-rl doctor RUN_DIR`: what a run's metrics say went wrong, with the evidence and the change to try.

Each check reads the unified metric rows (`metrics.jsonl`), smoothed where RL noise would mislead: a
series is compared as the mean of its first and last fifths, or over rolling windows of a tenth of
the run. A finding names the steps and values that show it. A run too short to judge (under
`MIN_ROWS` rows) gets no findings, and says so.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.errors import DataError
from llm_rl.run_folder import METRICS_FILE, RECIPE_FILE, read_rows, stage_folder
from llm_rl.schema import Recipe

# Fewer rows than this say nothing reliable about trends.
MIN_ROWS = 20
# The share of rows at each end of the run that is averaged as its start and its end.
END_SHARE = 0.2


@dataclass(frozen=True)
class Finding:
    """One problem: what it is, the rows that show it, and what to change."""

    name: str
    evidence: str
    advice: str


@dataclass(frozen=True)
class Run:
    """A run folder's rows and settings."""

    rows: list[dict[str, Any]]
    recipe: dict[str, Any]

    @property
    def algorithm(self) -> str:
        return self.recipe.get("algorithm", Recipe.model_fields["algorithm"].default)

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) for every row that has the metric."""
        return [(row["step"], float(row[key])) for row in self.rows if isinstance(row.get(key), int | float)]


def ends(points: list[tuple[int, float]]) -> tuple[float, float]:
    """The mean of the first and of the last fifth of a series."""
    count = max(1, int(len(points) * END_SHARE))
    return statistics.mean(v for _, v in points[:count]), statistics.mean(v for _, v in points[-count:])


def trend(run: Run, key: str) -> tuple[list[tuple[int, float]], float, float] | None:
    """(points, start, end) of a metric long enough to judge, or None."""
    points = run.series(key)
    if len(points) < MIN_ROWS:
        return None
    return (points, *ends(points))


def window(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Rolling means over a tenth of the series (at least 3 points), keyed by each window's last step."""
    size = max(3, len(points) // 10)
    return [
        (points[i][0], statistics.mean(v for _, v in points[i - size + 1 : i + 1]))
        for i in range(size - 1, len(points))
    ]


def span(points: list[tuple[int, float]]) -> str:
    return f"steps {points[0][0]}-{points[-1][0]}"


def reward_flat(run: Run) -> Finding | None:
    """No rise of the smoothed reward from the first fifth of the run to the last."""
    found = trend(run, "reward/mean")
    if found is None:
        return None
    points, first, last = found
    spread = statistics.pstdev(v for _, v in points)
    if last - first > max(0.01, 0.5 * spread):
        return None
    evidence = f"reward/mean {first:.3f} in the first fifth and {last:.3f} in the last ({span(points)})"
    algorithm = ALGORITHMS.get(run.algorithm)
    hint = algorithm.flat_reward_hint(run.series) if algorithm else None
    if hint is not None:
        shown, advice = hint
        return Finding("reward flat", f"{evidence}; {shown}", advice)
    return Finding(
        "reward flat", evidence, "raise training.learning_rate, or check the reward on sample completions"
    )


def reward_swinging(run: Run) -> Finding | None:
    """The smoothed reward falls back by more than half its range, three times or more."""
    points = window(run.series("reward/mean"))
    if len(points) < MIN_ROWS // 2:
        return None
    values = [v for _, v in points]
    value_range = max(values) - min(values)
    # Swings smaller than a quarter of the per-sample reward spread are sampling noise, not instability.
    spread = run.series("reward/std")
    if value_range <= 0.25 * (statistics.median(v for _, v in spread) if spread else 0.0) or value_range <= 0:
        return None
    drops, peak, falling = [], values[0], False
    for step, value in points:
        if value > peak:
            peak, falling = value, False
        elif not falling and peak - value > 0.5 * value_range:
            drops.append(step)
            falling = True
            peak = value
    if len(drops) < 3:
        return None
    return Finding(
        "reward swinging",
        f"the smoothed reward/mean fell back by more than half its range {len(drops)} times (steps {drops})",
        "narrow the clip range (grpo.epsilon / ppo.cliprange), lower training.learning_rate, or normalise "
        "advantages over the batch (advantages.normalize: batch; for PPO also advantages.whiten_rewards)",
    )


def kl_drifting(run: Run) -> Finding | None:
    """KL ends far above where it began."""
    found = trend(run, "kl")
    if found is None:
        return None
    points, first, last = found
    if last < 0.1 or last < 3 * max(first, 1e-3):
        return None
    algorithm = ALGORITHMS.get(run.algorithm)
    coefficient = algorithm.KL_COEFFICIENT if algorithm else "the KL coefficient"
    return Finding(
        "KL drifting up",
        f"kl {first:.3f} in the first fifth and {last:.3f} in the last ({span(points)})",
        f"the policy is leaving the reference model: raise {coefficient} or lower training.learning_rate",
    )


def grad_norm_high(run: Run) -> Finding | None:
    """Grad norm above 1 (and above the clipping limit) for a long stretch of rows."""
    points = run.series("grad_norm")
    limit = max(1.0, (run.recipe.get("training") or {}).get("max_grad_norm") or 1.0)
    longest, current, start, where = 0, 0, None, None
    for step, value in points:
        if value > limit:
            current += 1
            start = step if current == 1 else start
            if current > longest:
                longest, where = current, (start, step)
        else:
            current = 0
    if where is None or longest < max(10, len(points) // 4):
        return None
    return Finding(
        "grad norm high",
        f"grad_norm above {limit:g} for {longest} rows in a row (steps {where[0]}-{where[1]})",
        "every update is being clipped: lower training.learning_rate, or check the reward's scale",
    )


def entropy_collapsing(run: Run) -> Finding | None:
    """Entropy falls below a fifth of its start within the first third of the run."""
    points = run.series("entropy")
    if len(points) < MIN_ROWS:
        return None
    start = ends(points)[0]
    early = points[: len(points) // 3]
    collapsed = next(((s, v) for s, v in early if start > 0 and v < 0.2 * start), None)
    if collapsed is None:
        return None
    return Finding(
        "entropy collapsing early",
        f"entropy {start:.3f} at the start and {collapsed[1]:.3f} by step {collapsed[0]}, a third of the way in",
        "the policy stops exploring: raise generation.temperature, lower training.learning_rate, raise the "
        "KL coefficient, or (PPO) add an entropy bonus with ppo.entropy_coef",
    )


def completions_truncated(run: Run) -> Finding | None:
    """Completions end at the length limit in most rows."""
    limit = (run.recipe.get("generation") or {}).get("max_new_tokens")
    points = run.series("completion_length/mean")
    clipped = run.series("completion_length/clipped_ratio")
    if clipped and statistics.mean(v for _, v in clipped) > 0.3:
        share = statistics.mean(v for _, v in clipped)
        evidence = (
            f"{share:.0%} of completions hit the length limit on average (completion_length/clipped_ratio)"
        )
    elif limit and points and sum(v >= 0.95 * limit for _, v in points) > len(points) / 2:
        evidence = f"completion_length/mean at or near generation.max_new_tokens ({limit}) in most rows"
    else:
        return None
    return Finding(
        "completions truncated",
        evidence,
        "raise generation.max_new_tokens, or reward ending on time (a format or length term); "
        "truncated answers score as wrong",
    )


def throughput_falling(run: Run) -> Finding | None:
    """Samples per second at the end well below the start (the first fifth's mean absorbs warm-up)."""
    found = trend(run, "samples_per_second")
    if found is None:
        return None
    points, first, last = found
    if last >= 0.7 * first:
        return None
    return Finding(
        "throughput falling",
        f"samples_per_second {first:.1f} in the first fifth and {last:.1f} in the last ({span(points)})",
        "look for completions growing longer (completion_length/mean), memory pressure (peak_memory_mb) or "
        "checkpoint I/O (checkpointing.every)",
    )


CHECKS: list[Callable[[Run], Finding | None]] = [
    reward_flat,
    reward_swinging,
    kl_drifting,
    grad_norm_high,
    entropy_collapsing,
    completions_truncated,
    throughput_falling,
]


def read_run(folder: Path) -> Run:
    """A run folder's metric rows and resolved recipe; a folder without metrics is bad input."""
    if not (folder / METRICS_FILE).is_file():
        raise DataError(f"no {METRICS_FILE}: not a run folder", where=str(folder))
    try:
        rows = read_rows(folder)
    except json.JSONDecodeError as err:
        raise DataError(f"{METRICS_FILE} is not JSON lines: {err}", where=str(folder)) from None
    recipe_path = folder / RECIPE_FILE
    recipe = yaml.safe_load(recipe_path.read_text()) if recipe_path.is_file() else {}
    return Run(rows, recipe or {})


def diagnose(folder: Path) -> tuple[list[Finding], int]:
    """The findings for a run folder and the number of rows they were read from.

    A staged run is judged stage by stage, each against its own recipe: a GRPO stage followed by a
    slower PPO stage is not a fall in throughput.
    """
    run = read_run(folder)
    findings = []
    for label, part in split_stages(run, folder):
        for check in CHECKS:
            finding = check(part)
            if finding is not None:
                findings.append(Finding(f"{label}{finding.name}", finding.evidence, finding.advice))
    return findings, len(run.rows)


def split_stages(run: Run, folder: Path) -> list[tuple[str, Run]]:
    """("", the run) for a plain run; ("stage NN-name: ", its rows and recipe) per stage of a staged one."""
    stages = run.recipe.get("stages") or []
    if not stages:
        return [("", run)]
    parts = []
    for index, stage in enumerate(stages):
        stage_dir = stage_folder(folder, index, stage["name"])
        recipe_path = stage_dir / RECIPE_FILE
        recipe = yaml.safe_load(recipe_path.read_text()) if recipe_path.is_file() else run.recipe
        rows = [row for row in run.rows if row.get("stage") == index]
        parts.append((f"stage {stage_dir.name}: ", Run(rows, recipe or {})))
    return parts


def describe(findings: list[Finding], rows: int) -> str:
    """The report `llm-rl doctor` prints."""
    if rows < MIN_ROWS:
        return f"{rows} rows: too few to judge trends (at least {MIN_ROWS})"
    if not findings:
        return f"{rows} rows: no findings"
    lines = [f"{rows} rows, {len(findings)} finding(s):"]
    for finding in findings:
        lines += [f"- {finding.name}: {finding.evidence}", f"  try: {finding.advice}"]
    return "\n".join(lines)

"""Staged runs: a recipe's `stages:` trained one after another in one run folder.

Each stage is a whole recipe (`llm_rl.recipe.stages`) trained into `stages/NN-name/` of the run
folder, its policy warm-started from the previous stage's final weights; a PPO stage after a PPO stage
keeps the trained critic too. The run folder's own `metrics.jsonl`, wandb run and Prometheus endpoint
receive every stage's rows on one axis: `step` and `samples` count from the first stage, `stage` says
which one. Run again after a crash, finished stages are skipped and the interrupted one resumes from its
latest checkpoint.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from accelerate import PartialState

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.monitoring.metrics import JsonlSink, MetricSink
from llm_rl.monitoring.sinks import make_sinks
from llm_rl.recipe.stages import stage_recipes
from llm_rl.run.summary import run_summary, write_summary
from llm_rl.run_folder import (
    FINAL_DIR,
    METRICS_FILE,
    RECIPE_FILE,
    SUMMARY_FILE,
    checkpoint_step,
    read_rows,
    write_atomic,
)
from llm_rl.schema import Recipe
from llm_rl.training.args import is_main_process
from llm_rl.training.checkpoints import list_checkpoints

# A stage that ended this way hands its policy on to the next; any other status ends the run.
FINISHED = ("completed", "early_stopped")


@dataclass
class StageContext:
    """Where a stage sits in its staged run: its index, the counters before it, the run's own sinks."""

    index: int
    step_offset: int
    samples_offset: int
    run_sinks: list[MetricSink]

    def local_sinks(self, stage_folder: Path) -> list[MetricSink]:
        """The stage folder's own metrics.jsonl (its resume bookkeeping), and the run's sinks."""
        return [JsonlSink(stage_folder / METRICS_FILE), StageSink(self)]


class StageSink:
    """Hands a stage's rows to the run's sinks with run-wide counters and the stage index."""

    def __init__(self, context: StageContext) -> None:
        self.context = context

    def write(self, row: dict[str, Any]) -> None:
        shifted = {
            **row,
            "step": row["step"] + self.context.step_offset,
            "samples": row["samples"] + self.context.samples_offset,
            "stage": self.context.index,
        }
        for sink in self.context.run_sinks:
            sink.write(shifted)

    def close(self) -> None:
        """The staged run closes its sinks once, after the last stage."""


def read_summary(folder: Path) -> dict[str, Any] | None:
    """A run folder's run_summary.json, or None before it has one."""
    path = folder / SUMMARY_FILE
    return json.loads(path.read_text()) if path.exists() else None


def hand_over(stage: Recipe, previous: Recipe, overrides: dict[str, Any]) -> None:
    """Start a stage from the previous stage's final policy, and whatever else its algorithm keeps
    (PPO after PPO: the critic)."""
    final = previous.output_dir / FINAL_DIR
    stage.model.policy = str(final)
    ALGORITHMS[stage.algorithm].hand_over(stage, final, overrides)


def kept_rows(run_folder: Path, stages: list[Recipe]) -> list[dict[str, Any]]:
    """The run's metric rows that a restart keeps: finished stages whole, the interrupted one to its
    latest checkpoint, nothing after it."""
    rows = read_rows(run_folder)
    kept: list[dict[str, Any]] = []
    step_offset = 0
    for index, stage in enumerate(stages):
        summary = read_summary(stage.output_dir)
        own = [row for row in rows if row.get("stage") == index]
        if summary is not None and summary["status"] in FINISHED:
            kept += own
            step_offset += summary["steps"]
            continue
        checkpoints = list_checkpoints(stage.output_dir)
        if checkpoints:
            last_step = step_offset + checkpoint_step(checkpoints[-1])
            kept += [row for row in own if row["step"] <= last_step]
        break
    return kept


def prepare_staged_folder(recipe: Recipe, stages: list[Recipe]) -> Path:
    """The run folder with the staged recipe, and only the metric rows a restart continues from."""
    folder = recipe.output_dir
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / RECIPE_FILE, yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    (folder / SUMMARY_FILE).unlink(missing_ok=True)
    rows = kept_rows(folder, stages)
    write_atomic(folder / METRICS_FILE, "".join(json.dumps(row) + "\n" for row in rows))
    return folder


def staged_summary(
    recipe: Recipe, status: str, stages: list[Recipe], summaries: list[dict[str, Any]], started: float
) -> dict[str, Any]:
    """The run summary of a staged run: its stages' steps and samples summed, and one entry per stage
    that ran."""
    resumed = [s["resumed_from"] for s in summaries if s.get("resumed_from")]
    return run_summary(
        recipe.output_dir,
        status,
        summaries[-1]["algorithm"] if summaries else recipe.algorithm,
        sum(s["steps"] for s in summaries),
        sum(s["samples"] for s in summaries),
        started,
        [path for stage in stages for path in list_checkpoints(stage.output_dir)],
        resumed[0] if resumed else None,
        stages=[
            {
                "name": entry.name,
                "algorithm": summary["algorithm"],
                "status": summary["status"],
                "steps": summary["steps"],
                "samples": summary["samples"],
                "folder": str(stage.output_dir),
            }
            for entry, stage, summary in zip(recipe.stages, stages, summaries, strict=False)
        ],
    )


# Trains one stage's recipe in its place in the staged run, returning its summary (`llm_rl.run.training.train`).
StageTrainer = Callable[[Recipe, StageContext], dict[str, Any]]


def train_stages(recipe: Recipe, train_stage: StageTrainer) -> dict[str, Any]:
    """Run every stage in order with `train_stage` and return the run's summary; the run folder is
    consistent whatever happens."""
    started = time.perf_counter()
    folder = recipe.output_dir
    stages = stage_recipes(recipe)
    main = is_main_process()
    if main:
        prepare_staged_folder(recipe, stages)
    sinks = make_sinks(recipe, folder) if main else []
    summaries: list[dict[str, Any]] = []
    status = "failed"
    try:
        for index, (entry, stage) in enumerate(zip(recipe.stages, stages, strict=True)):
            if index > 0:
                hand_over(stage, stages[index - 1], entry.overrides)
            summary = read_summary(stage.output_dir)
            if summary is None or summary["status"] not in FINISHED:
                offsets = (sum(s["steps"] for s in summaries), sum(s["samples"] for s in summaries))
                summary = train_stage(stage, StageContext(index, *offsets, sinks))
                # Every process needs the stage's final folder before the next stage loads it.
                PartialState().wait_for_everyone()
            summaries.append(summary)
            status = summary["status"]
            if status not in FINISHED:
                break
        if status in FINISHED and main:
            publish_final(stages[-1].output_dir / FINAL_DIR, folder / FINAL_DIR)
    finally:
        for sink in sinks:
            sink.close()
        summary_of_run = staged_summary(recipe, status, stages, summaries, started)
        if main:
            write_summary(folder, summary_of_run)
    return summary_of_run


def publish_final(stage_final: Path, run_final: Path) -> None:
    """The last stage's final policy becomes the run's `final/` (moved, not copied: models are large)."""
    if not stage_final.is_dir():
        return
    if run_final.exists():
        shutil.rmtree(run_final)
    stage_final.rename(run_final)

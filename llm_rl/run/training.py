"""A training run from a validated recipe, as a fixed sequence of short, named steps.

seed -> preflight (`llm_rl.algorithms.preflight`, shared with `llm-rl validate`: tokenizer, prompts,
rewards, policy, the algorithm's own checks; all bad input is found here, before the run folder is
touched) -> run folder -> trainer -> train -> final model -> run summary.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import PrinterCallback, ProgressCallback, Trainer, set_seed

from llm_rl.algorithms.base import Components
from llm_rl.algorithms.preflight import preflight
from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.monitoring.alerts import Alerts, NoNonFiniteSaves
from llm_rl.monitoring.gpu_health import GpuHealth
from llm_rl.monitoring.metrics import MetricsCallback
from llm_rl.monitoring.progress import ProgressLine, QuietProgressCallback, bars_wanted, without_bars
from llm_rl.monitoring.sinks import make_sinks, wandb_notifier
from llm_rl.run.stages import FINISHED, StageContext, train_stages
from llm_rl.run.summary import run_summary, write_summary
from llm_rl.run_folder import (
    FINAL_DIR,
    METRICS_FILE,
    RECIPE_FILE,
    SUMMARY_FILE,
    RunFolderLock,
    apply_umask,
    checkpoint_step,
    read_rows,
    write_atomic,
)
from llm_rl.schema import Recipe
from llm_rl.training.args import is_main_process
from llm_rl.training.checkpoint_files import check_checkpoint
from llm_rl.training.checkpoints import (
    CheckpointManager,
    clear_staging,
    list_checkpoints,
    newest_readable,
    read_state,
)
from llm_rl.training.disk_space import DiskFull, disk_full_message, is_out_of_space, warn_if_no_room
from llm_rl.training.early_stopping import EarlyStopping, MetricWindow
from llm_rl.training.lost_ranks import ProcessRoll
from llm_rl.training.preemption import Preemption
from llm_rl.training.schedules import ScheduleCallback, active_schedules

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def serial_tokenizers_on_cpu() -> None:
    """Encode text on the calling thread when training runs on the CPU, unless TOKENIZERS_PARALLELISM
    says otherwise.

    There torch's threads already use every core, and the tokenizers library's own thread pool only
    competes with them: the batches a training step encodes (reward-model texts, GRPO's prompts) are
    small, and waking that pool cost about 1 ms an update on 2 cores (scripts/benchmark.py, PPO).
    """
    if not torch.accelerator.is_available():
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def find_resume_checkpoint(recipe: Recipe) -> Path | None:
    """The checkpoint to continue from: `auto` takes the newest one in the run folder whose files all
    read, saying which newer ones it passed over and why; a named one that does not read whole is refused
    (`CheckpointError`, naming the file)."""
    resume = recipe.checkpointing.resume
    if resume == "never":
        return None
    if resume != "auto":
        check_checkpoint(Path(resume))
        return Path(resume)
    checkpoint, damaged = newest_readable(recipe.output_dir)
    if is_main_process():
        for passed, err in damaged:
            print(
                f"warning: {passed.name} is damaged ({err}); resuming from "
                f"{checkpoint.name if checkpoint else 'the start'}",
                file=sys.stderr,
            )
    return checkpoint


def finished_run(recipe: Recipe) -> dict[str, Any] | None:
    """The summary of the run already in the run folder when it finished and this recipe would not train
    it further (`resume: auto`, no larger budget), after saying so; None when there is training to do.

    Run again, a finished run changes nothing: not its folder, not its final model.
    """
    summary_path = recipe.output_dir / SUMMARY_FILE
    if recipe.checkpointing.resume != "auto" or not summary_path.is_file():
        return None
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    status = summary.get("status") if isinstance(summary, dict) else None
    if status not in FINISHED:
        return None
    if status == "completed" and not recipe.stages:
        budget = ALGORITHMS[recipe.algorithm].trainer_config(recipe).max_steps
        if budget > summary.get("steps", 0):
            return None  # the budget was raised: train on from the newest checkpoint
    if is_main_process():
        print(
            f"{recipe.output_dir}: already finished ({status}, {summary.get('steps')} steps, "
            f"{summary.get('samples')} samples); nothing changed. Raise the budget to train further, or "
            "set run.output_dir to start a new run",
            file=sys.stderr,
        )
    return summary


def prepare_run_folder(recipe: Recipe, resume_from: Path | None) -> Path:
    """Create the run folder with the resolved recipe; keep only the metric rows a resume continues from."""
    folder = recipe.output_dir
    folder.mkdir(parents=True, exist_ok=True)
    clear_staging(folder)
    write_atomic(folder / RECIPE_FILE, yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    (folder / SUMMARY_FILE).unlink(missing_ok=True)
    metrics = folder / METRICS_FILE
    kept = []
    if resume_from is not None and metrics.exists():
        last_step = checkpoint_step(resume_from)
        kept = [line for line in metrics.read_text().splitlines() if json.loads(line)["step"] <= last_step]
    write_atomic(metrics, "".join(f"{line}\n" for line in kept))
    return folder


def restore_watchers(
    checkpoint: Path, folder: Path, score: MetricWindow, early_stopping: EarlyStopping | None
) -> None:
    """A resumed run's checkpoint score window and early-stopping state, as they were at the checkpoint."""
    for row in read_rows(folder):
        score(row)
    saved = read_state(checkpoint).get("early_stopping")
    if early_stopping is not None and saved is not None:
        early_stopping.load_state_dict(saved)


def final_partial(folder: Path) -> Path:
    """Where `final/` is written before it is renamed into place."""
    return folder / f".{FINAL_DIR}.partial"


def save_final(trainer: Trainer, components: Components, folder: Path) -> Path:
    """Save the trained policy and the user's tokenizer as a `save_pretrained` folder, replacing any
    earlier one."""
    final = folder / FINAL_DIR
    partial = final_partial(folder)
    trainer.save_model(str(partial))
    trainer.accelerator.wait_for_everyone()
    if is_main_process():
        (components.saved_tokenizer or components.tokenizer).save_pretrained(str(partial))
        apply_umask(partial)
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
    return final


def make_summary(
    recipe: Recipe, status: str, trainer: Trainer | None, samples: int, started: float, resumed: Path | None
) -> dict[str, Any]:
    """The run summary of a single-stage run (or of one stage, in its own folder)."""
    steps = trainer.state.global_step if trainer is not None else 0
    checkpoints = list_checkpoints(recipe.output_dir)
    resumed_from = str(resumed) if resumed else None
    return run_summary(
        recipe.output_dir, status, recipe.algorithm, steps, samples, started, checkpoints, resumed_from
    )


def train(recipe: Recipe, stage: StageContext | None = None) -> dict[str, Any]:
    """Run a recipe to the end and return its summary; the run folder is consistent whatever happens.

    A recipe with `stages:` runs them in turn (`llm_rl.run.stages`), which calls this once per stage with
    its place in the run.
    """
    finished = finished_run(recipe) if stage is None else None
    if finished is not None:
        return finished
    if recipe.stages:
        lock = RunFolderLock(recipe.output_dir) if is_main_process() else None
        try:
            return train_stages(recipe, train)
        finally:
            if lock is not None:
                lock.release()
    started = time.perf_counter()
    if not bars_wanted(recipe.monitoring.progress):
        without_bars()
    serial_tokenizers_on_cpu()
    set_seed(recipe.run.seed)
    # A named checkpoint that does not read whole is refused before any model loads.
    resume_from = find_resume_checkpoint(recipe)
    checked = preflight(recipe)
    algorithm, components = checked.algorithm, checked.components
    # A stage runs under its staged run's lock.
    lock = RunFolderLock(recipe.output_dir) if is_main_process() and stage is None else None
    try:
        return train_locked(recipe, stage, components, algorithm, resume_from, started)
    finally:
        if lock is not None:
            lock.release()


def train_locked(
    recipe: Recipe,
    stage: StageContext | None,
    components: Components,
    algorithm: Any,
    resume_from: Path | None,
    started: float,
) -> dict[str, Any]:
    """The run from its folder on, once this process holds the folder (`train`)."""
    folder = prepare_run_folder(recipe, resume_from) if is_main_process() else recipe.output_dir
    count_samples = algorithm.count_samples(recipe)
    sinks = (stage.local_sinks(folder) if stage else make_sinks(recipe, folder)) if is_main_process() else []
    gpu_health = GpuHealth() if is_main_process() else None
    metrics = MetricsCallback(algorithm.METRIC_NAMES, count_samples, sinks, gpu_health=gpu_health)
    score = MetricWindow.for_early_stopping(recipe.early_stopping)
    early_stopping = EarlyStopping(recipe.early_stopping) if recipe.early_stopping.enabled else None
    alerts = Alerts(recipe.monitoring.alerts, notify=wandb_notifier(stage.run_sinks if stage else sinks))
    if resume_from is not None:
        restore_watchers(resume_from, folder, score, early_stopping)
        if is_main_process():
            warn_if_no_room(resume_from)
    checkpoints = CheckpointManager(count_samples, recipe.checkpointing.keep_last, score, early_stopping)
    no_broken_saves = NoNonFiniteSaves()
    preemption = Preemption()
    schedules = active_schedules(recipe, algorithm.SCHEDULABLE)
    scheduled = (
        ScheduleCallback(schedules, count_samples, stage.samples_offset if stage else 0)
        if schedules
        else None
    )
    # Every callback llm_rl adds, in one list, called in this order after transformers' own; the schedule's
    # callback learns which trainer it sets once the trainer is built.
    callbacks = [
        metrics,
        preemption,
        checkpoints,
        *([early_stopping] if early_stopping else []),
        alerts,
        no_broken_saves,
        *([scheduled] if scheduled else []),
    ]
    trainer = algorithm.build_trainer(components, callbacks)
    if scheduled:
        scheduled.set_through(partial(algorithm.apply_setting, trainer))
    progress = ProgressLine(
        trainer.args.max_steps // trainer.args.logging_steps, enabled=recipe.monitoring.progress
    )
    # Each metrics row goes to these, in this order: the scheduled values first (the row records the
    # values in effect), the score before early stopping reads it, the alerts, and the progress line last.
    metrics.on_row = [
        *([scheduled] if scheduled else []),
        score,
        *([early_stopping] if early_stopping else []),
        alerts,
        progress,
    ]
    # TRL's own progress bar and log printer would repeat what ProgressLine shows, under TRL's names.
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if not trainer.args.disable_tqdm:
        trainer.add_callback(QuietProgressCallback())
    status = "failed"
    roll = ProcessRoll.join()
    preemption.install()
    try:
        if resume_from is not None and checkpoint_step(resume_from) >= trainer.args.max_steps:
            algorithm.finish_from_checkpoint(trainer, resume_from)
        else:
            trainer.train(**({"resume_from_checkpoint": str(resume_from)} if resume_from else {}))
        if preemption.stopped:
            status = "preempted"  # not finished: no final model
        else:
            if not no_broken_saves.broken:
                save_final(trainer, components, folder)
            if alerts.stopped or no_broken_saves.broken:
                status = "stopped_by_alert"
            elif early_stopping and early_stopping.triggered:
                status = "early_stopped"
            else:
                status = "completed"
    except Exception as err:
        if roll is not None:
            roll.report_lost(err)
        if is_out_of_space(err, folder):
            raise disk_full(folder) from err
        raise
    finally:
        preemption.uninstall()
        metrics.close()
        samples = count_samples(trainer.state, {})
        summary = make_summary(recipe, status, trainer, samples, started, resume_from)
        if status == "preempted":
            summary["seconds_from_signal_to_exit"] = round(preemption.seconds_since_signal() or 0.0, 2)
            if is_main_process():
                print(
                    f"preempted ({preemption.signal_name}): checkpoint at step {trainer.state.global_step}, "
                    f"{summary['seconds_from_signal_to_exit']} s after the signal; the same command resumes",
                    file=sys.stderr,
                )
        if is_main_process():
            write_summary(folder, summary)
        if status == "preempted":
            # No process leaves before the summary says preempted: a launcher that ends first gets the
            # others killed (srun --kill-on-bad-exit), and a requeue is decided by the summary.
            trainer.accelerator.wait_for_everyone()
    return summary


def disk_full(folder: Path) -> DiskFull:
    """The error a run stops with when its disk is full, once the half-written checkpoint or final model
    that took the last of the space is gone (nothing half-written counts as one)."""
    if is_main_process():
        clear_staging(folder)
        shutil.rmtree(final_partial(folder), ignore_errors=True)
    readable, _ = newest_readable(folder)
    return DiskFull(disk_full_message(folder, readable))

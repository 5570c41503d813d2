"""Benchmark: what llm_rl costs over raw TRL, where PPO's time goes, GRPO against PPO on the same work,
and how cost grows.

    python scripts/benchmark.py [--quick] [--repeats 5] [--steps 12] [--output runs/benchmark] [--write-docs]

Every measurement is one training run in its own process, so that its peak memory is its own. The
sides of a comparison alternate over the repeats in one invocation, the order reversed every other
repeat (A B, B A, A B ...): drift in the machine's speed, and the place in the order, reach all sides
alike. The script reports medians, and the median of the ratios of each repeat's pair.

- (a) GRPO: `llm_rl.run.training.train` on the embedded recipe against TRL's `GRPOTrainer` built by hand with
  the same `GRPOConfig` (from `GRPO.trainer_config`, `llm_rl.algorithms.grpo`), model, prompts and reward functions
  written as plain Python.
- (b) PPO (llm_rl's own trainer, with a `reward_model` reward): its update by phase, with timers on
  each step of the loop (generate; score; log-probs, reference and values; advantages; the PPO epochs;
  metrics and callbacks), medians over the updates of each run and over the runs.
- (c) GRPO against PPO at the same samples per update: samples/s, generated tokens/s, peak memory.
- (d) GRPO scaling: completion lengths and batch sizes, time per sample and peak memory, with the
  growth exponent fitted on a log-log scale (time per sample ~ length^k).
- (e) checkpoint saves: one every 4 updates, on both sides of (a) and on PPO (its critic too), the
  time of each save, and what it costs at the default cadence of a checkpoint every 100K samples.

Time per step is measured between the end of the first update and the end of the last (the first
includes warm-up). Peak memory is the process's peak resident set (CPU) or peak allocated CUDA memory.
`--quick` runs a reduced set in under 10 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SCALING_PLOT = "benchmark_scaling.png"
# Samples per update on both sides of every comparison: GRPO 4 prompts x 4 completions, PPO 16 prompts.
BATCH = 16
GROUP = 4


# ----------------------------------------------------------------------------------------------------
# Workers: one training run each, in a process of its own
# ----------------------------------------------------------------------------------------------------


class StepTimer(TrainerCallback):
    """Timestamps the end of every update, in wall time and in this process's CPU time, and times every
    checkpoint save: from the end of its update to this callback's `on_save`, which runs after the save
    and after the `on_save` of the callbacks added before it (our checkpoint manager's among them)."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []
        self.saves: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        return control

    def on_save(self, args, state, control, **kwargs):
        self.saves.append(time.perf_counter() - self.ends[-1])
        return control

    def seconds_per_step(self) -> float:
        """Steady-state time per update: from the end of the first to the end of the last."""
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1)

    def cpu_seconds_per_step(self) -> float:
        """CPU time per update over the same span, all threads: less moved by other load than wall time."""
        return (self.cpu_ends[-1] - self.cpu_ends[0]) / (len(self.cpu_ends) - 1)


class PhaseClock(TrainerCallback):
    """Wall time spent in named parts of our PPO update, per update: where its time goes.

    `wrap` puts a timer around a method; every `on_step_end` closes an update. `medians` gives each
    part's median time over the updates after the first (which includes warm-up).
    """

    def __init__(self) -> None:
        self.running: dict[str, float] = {}
        self.updates: list[dict[str, float]] = []

    def wrap(self, owner: Any, name: str, part: str) -> None:
        method = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.running[part] = self.running.get(part, 0.0) + time.perf_counter() - started

        setattr(owner, name, timed)

    def on_step_end(self, args, state, control, **kwargs):
        self.updates.append(self.running)
        self.running = {}
        return control

    def medians(self) -> dict[str, float]:
        parts = {part for update in self.updates for part in update}
        return {part: statistics.median(u.get(part, 0.0) for u in self.updates[1:]) for part in sorted(parts)}


# The steps of one PPO update, in the loop's order (llm_rl.algorithms.ppo.trainer).
PPO_PHASES = (
    "generate",
    "score (reward functions)",
    "log-probs, reference and values",
    "advantages (KL penalty, GAE)",
    "PPO epochs (forward, backward, clipping, optimizer)",
    "metrics and callbacks",
)


def ppo_phase_clock() -> PhaseClock:
    """A clock on each step of our PPO update."""
    from transformers.trainer_callback import CallbackHandler

    from llm_rl.algorithms.ppo import rollout_maker, trainer
    from llm_rl.generation.transformers_generators import HFGenerator

    clock = PhaseClock()
    generate, score, forwards, advantages, epochs, metrics = PPO_PHASES
    clock.wrap(HFGenerator, "generate", generate)
    clock.wrap(rollout_maker.RolloutMaker, "score", score)
    clock.wrap(rollout_maker.RolloutMaker, "evaluate_responses", forwards)
    clock.wrap(rollout_maker, "estimate_advantages", advantages)
    clock.wrap(trainer.PPOTrainer, "optimise", epochs)
    clock.wrap(trainer.PPOTrainer, "update_metrics", metrics)
    clock.wrap(CallbackHandler, "call_event", metrics)
    return clock


def peak_memory_mb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def recipe_for(algorithm: str, output: Path, steps: int, extra: list[str]):
    """The embedded recipe at the benchmark's batch shape, with nothing written but the run folder."""
    from llm_rl.recipe.load import load_recipe

    shape = [f"training.per_device_batch_size={BATCH}"]
    if algorithm == "grpo":
        shape.append(f"grpo.num_generations={GROUP}")
    return load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml",
        [f"run.output_dir={output}", f"training.max_steps={steps}", "monitoring.wandb.mode=disabled",
         "monitoring.progress=false", "checkpointing.resume=never", "checkpointing.every=1000000000",
         "run.seed=0", *shape, *extra],
    )  # fmt: skip


def run_ours(recipe, *extra_callbacks: TrainerCallback) -> StepTimer:
    """`llm_rl.run.training.train`, with a step timer (and any other callbacks) added to the trainer it builds."""
    from llm_rl.algorithms.registry import ALGORITHMS
    from llm_rl.run.training import train

    timer = StepTimer()
    algorithm = ALGORITHMS[recipe.algorithm]
    ALGORITHMS[recipe.algorithm] = WithCallbacks(algorithm, [timer, *extra_callbacks])
    try:
        train(recipe)
    finally:
        ALGORITHMS[recipe.algorithm] = algorithm
    return timer


class WithCallbacks:
    """An algorithm whose trainers get more callbacks (a module or a declaration, which is frozen)."""

    def __init__(self, algorithm: Any, callbacks: list[TrainerCallback]) -> None:
        self.algorithm = algorithm
        self.callbacks = callbacks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.algorithm, name)

    def build_trainer(self, components: Any, callbacks: list[TrainerCallback]) -> Any:
        return self.algorithm.build_trainer(components, [*callbacks, *self.callbacks])


def exact_sum(prompts, completions, answer, **kwargs) -> list[float]:
    """The arithmetic recipe's accuracy reward, as a raw TRL user writes it."""
    return [float(c.strip() == a.strip()) for c, a in zip(completions, answer, strict=True)]


def bare_number(prompts, completions, **kwargs) -> list[float]:
    """The arithmetic recipe's format reward (`^\\d+$`), as a raw TRL user writes it."""
    return [float(c.isdigit()) for c in completions]


def run_raw_grpo(recipe) -> StepTimer:
    """TRL's GRPOTrainer built by hand: the same config, model, prompts and rewards, nothing of ours."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import GRPOTrainer

    from llm_rl.algorithms.grpo import GRPO
    from llm_rl.algorithms.trl_groups.trainer import compiled_generation
    from llm_rl.data.tasks import build_arithmetic
    from llm_rl.models.load import model_dtype, resolve_model_path

    set_seed(0)
    path = resolve_model_path(recipe.model.policy)
    dtype = model_dtype(recipe.model.dtype, recipe.training.precision)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    dataset = build_arithmetic(recipe.data, recipe.run.seed)["train"]
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(path, dtype=dtype),
        reward_funcs=[exact_sum, bare_number],
        args=GRPO.trainer_config(recipe),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    # The same generation backend: with `static`, the compile switch a TRL user sets by hand.
    compiled_generation(trainer, recipe)
    trainer.train()
    return timer


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement described by `spec` and return its numbers (PPO sides score with a reward
    model when the spec names one)."""
    output = Path(spec["output"])
    extra = list(spec.get("overrides", []))
    if spec["side"].startswith("ppo") and spec.get("reward_model"):
        extra.append(f"rewards=[{{name: reward_model, path: '{spec['reward_model']}'}}]")
    algorithm = spec["side"].split("-")[0]
    recipe = recipe_for(algorithm, output, spec["steps"], extra)
    clock = ppo_phase_clock() if spec["side"] == "ppo-ours" else None
    if spec["side"] == "grpo-trl":
        timer = run_raw_grpo(recipe)
    else:
        timer = run_ours(recipe, *([clock] if clock else []))
    seconds = timer.seconds_per_step()
    samples_per_second = recipe.training.per_device_batch_size / seconds
    return {
        **({"parts": clock.medians()} if clock else {}),
        "seconds_per_step": seconds,
        "cpu_seconds_per_step": timer.cpu_seconds_per_step(),
        "samples_per_second": samples_per_second,
        "tokens_per_second": samples_per_second * completion_length(output)
        if spec["side"].endswith("ours")
        else None,
        "peak_memory_mb": peak_memory_mb(),
        "save_seconds": statistics.median(timer.saves) if timer.saves else None,
    }


def completion_length(run: Path) -> float:
    """Mean generated tokens per completion, from the run's metrics.jsonl."""
    from llm_rl.run_folder import read_rows

    return statistics.mean(row["completion_length/mean"] for row in read_rows(run))


# ----------------------------------------------------------------------------------------------------
# The driver: alternating sides, medians, ratios
# ----------------------------------------------------------------------------------------------------


def measure(
    side: str, output: Path, steps: int, reward_model: Path, overrides: list[str] = ()
) -> dict[str, Any]:
    """One measurement in a fresh process (our PPO's with the time of each phase of its update)."""
    spec = {
        "side": side,
        "output": str(output),
        "steps": steps,
        "reward_model": str(reward_model),
        "overrides": list(overrides),
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    result = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if result.returncode != 0:
        sys.exit(f"{side} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def alternate(
    sides: list[str], repeats: int, root: Path, steps: int, reward_model: Path, overrides: list[str] = ()
) -> dict[str, list[dict]]:
    """Every side once per repeat, the order reversed every other repeat: A B C, C B A, A B C ...

    Drift in the machine's speed reaches every side alike, and so does the place in the order (the run
    just after a heavy one finds the machine in another state than the run after a light one).
    """
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for repeat in range(repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            results[side].append(measure(side, root / f"{side}-{repeat}", steps, reward_model, overrides))
            print(
                f"  {side} #{repeat + 1}: {results[side][-1]['seconds_per_step'] * 1000:.1f} ms/step",
                flush=True,
            )
    return results


def median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def build_reward_model(folder: Path, body: str = "builtin:tiny-arithmetic") -> Path:
    """A sequence classifier on a model's body (the embedded one by default), saved with its tokenizer
    (both sides read it)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from llm_rl.models.load import resolve_model_path

    path = resolve_model_path(body)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(path).save_pretrained(folder)
    return folder


def fitted_exponent(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of log y against log x: y ~ x^k."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


OVERHEAD_HEADER = [
    "| | raw TRL ms/step | llm_rl ms/step | wall-time ratio, median of pairs (range) "
    "| CPU-time ratio (range) | raw TRL peak MB | llm_rl peak MB | memory ratio |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
]


def overhead_table(name: str, results: dict[str, list[dict]], ours: str, raw: str) -> list[str]:
    """One row: medians of both sides, and the time ratio of each adjacent pair (its median and range)."""
    paired = [
        o["seconds_per_step"] / r["seconds_per_step"]
        for o, r in zip(results[ours], results[raw], strict=True)
    ]
    paired_cpu = [
        o["cpu_seconds_per_step"] / r["cpu_seconds_per_step"]
        for o, r in zip(results[ours], results[raw], strict=True)
    ]
    memory_ratio = median(results[ours], "peak_memory_mb") / median(results[raw], "peak_memory_mb")
    return [
        f"| {name} | {median(results[raw], 'seconds_per_step') * 1000:.1f} | "
        f"{median(results[ours], 'seconds_per_step') * 1000:.1f} | **{statistics.median(paired):.3f}** "
        f"({min(paired):.2f}-{max(paired):.2f}) | **{statistics.median(paired_cpu):.3f}** "
        f"({min(paired_cpu):.2f}-{max(paired_cpu):.2f}) | {median(results[raw], 'peak_memory_mb'):.0f} | "
        f"{median(results[ours], 'peak_memory_mb'):.0f} | **{memory_ratio:.3f}** |"
    ]


def phase_table(runs: list[dict]) -> list[str]:
    """(b) Our PPO update by phase: each phase's median over the runs (each run's own median over its
    updates), and its share of the update."""
    update = median(runs, "seconds_per_step")
    phases = {phase: statistics.median(run["parts"].get(phase, 0.0) for run in runs) for phase in PPO_PHASES}
    rest = update - sum(phases.values())
    return [
        "",
        f"### PPO: where an update's time goes (llm_rl, {BATCH} samples an update, medians of {len(runs)} runs)",
        "",
        "| phase | ms per update | share of the update |",
        "| --- | --- | --- |",
        *(
            f"| {phase} | {seconds * 1000:.2f} | {seconds / update:.1%} |"
            for phase, seconds in phases.items()
        ),
        f"| the rest (prompt batches, scheduler, between the phases) | {rest * 1000:.2f} | {rest / update:.1%} |",
        f"| *the whole update* | *{update * 1000:.2f}* | *100%* |",
    ]


# Checkpoint timing: 8 updates, a checkpoint every 4 (the second one at the run's last update).
CHECKPOINT_RUN = {
    "steps": 8,
    "repeats": 2,
    "overrides": ["checkpointing.every=4", "checkpointing.unit=steps"],
}
DEFAULT_CHECKPOINT_SAMPLES = 100_000


def checkpoint_table(
    root: Path, reward_model: Path, grpo: dict[str, list[dict]], ppo: dict[str, list[dict]]
) -> list[str]:
    """(e) The median time of a checkpoint save, and what saving costs at the default cadence (a
    checkpoint every 100K samples) at our side's measured throughput; GRPO against raw TRL's."""
    print("(e) checkpoint saves")
    runs = alternate(
        ["grpo-trl", "grpo-ours", "ppo-ours"],
        CHECKPOINT_RUN["repeats"],
        root,
        CHECKPOINT_RUN["steps"],
        reward_model,
        CHECKPOINT_RUN["overrides"],
    )
    raw = median(runs["grpo-trl"], "save_seconds")
    rows = []
    for name, side, throughput in (
        ("GRPO", "grpo-ours", grpo["grpo-ours"]),
        ("PPO", "ppo-ours", ppo["ppo-ours"]),
    ):
        ours = median(runs[side], "save_seconds")
        between = DEFAULT_CHECKPOINT_SAMPLES / median(throughput, "samples_per_second")
        against_raw = f"{raw * 1000:.0f} | **{ours / raw:.2f}**" if name == "GRPO" else "- | -"
        rows.append(f"| {name} | {ours * 1000:.0f} | {against_raw} | {ours / between:.3%} |")
    return [
        "",
        f"### Checkpoint saves (medians, {CHECKPOINT_RUN['repeats']} alternating runs per side of "
        f"{CHECKPOINT_RUN['steps']} updates, a checkpoint every 4)",
        "",
        "| | llm_rl ms per save | raw TRL ms per save | ratio | time spent saving at a checkpoint every 100K samples |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        "PPO's checkpoint holds the critic beside the policy, and both models' optimizer states.",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a reduced set, under 10 minutes on 2 cores")
    parser.add_argument("--repeats", type=int, default=None, help="runs per side (default 9, quick 5)")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="GRPO updates per run (default 160, quick 80); PPO runs half as many",
    )
    parser.add_argument("--output", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--write-docs", action="store_true", help="write the tables into docs/benchmarks.md")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    repeats = args.repeats or (5 if args.quick else 9)
    steps = args.steps or (80 if args.quick else 160)
    # Half GRPO's updates: a PPO update costs several GRPO updates (a critic, a reference, PPO epochs).
    ppo_steps = max(4, steps // 2)
    root = args.output or Path(tempfile.mkdtemp(prefix="llm_rl_benchmark_"))
    started = time.perf_counter()
    reward_model = build_reward_model(root / "reward_model")
    lines = [
        f"Measured {date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"python {platform.python_version()}: `python scripts/benchmark.py{' --quick' if args.quick else ''}` "
        f"({repeats} alternating runs per side of {steps} GRPO or {ppo_steps} PPO updates, "
        f"{BATCH} samples an update).",
        "",
        "### Overhead over raw TRL (medians)",
        "",
        *OVERHEAD_HEADER,
    ]
    print("(a) GRPO: llm_rl against raw TRL")
    grpo = alternate(["grpo-trl", "grpo-ours"], repeats, root, steps, reward_model)
    lines += overhead_table("GRPO", grpo, "grpo-ours", "grpo-trl")
    print("(b) PPO: its update by phase")
    ppo = alternate(["ppo-ours"], repeats, root, ppo_steps, reward_model)
    lines += phase_table(ppo["ppo-ours"])

    samples_ratio = median(grpo["grpo-ours"], "samples_per_second") / median(
        ppo["ppo-ours"], "samples_per_second"
    )
    memory_ratio = median(grpo["grpo-ours"], "peak_memory_mb") / median(ppo["ppo-ours"], "peak_memory_mb")
    lines += [
        "",
        f"### GRPO against PPO at {BATCH} samples an update (llm_rl, medians)",
        "",
        "| | GRPO | PPO | GRPO / PPO |",
        "| --- | --- | --- | --- |",
        f"| samples/s | {median(grpo['grpo-ours'], 'samples_per_second'):.1f} | "
        f"{median(ppo['ppo-ours'], 'samples_per_second'):.1f} | {samples_ratio:.2f} |",
        f"| tokens/s | {median(grpo['grpo-ours'], 'tokens_per_second'):.1f} | "
        f"{median(ppo['ppo-ours'], 'tokens_per_second'):.1f} | "
        f"{median(grpo['grpo-ours'], 'tokens_per_second') / median(ppo['ppo-ours'], 'tokens_per_second'):.2f} |",
        f"| peak memory (MB) | {median(grpo['grpo-ours'], 'peak_memory_mb'):.0f} | "
        f"{median(ppo['ppo-ours'], 'peak_memory_mb'):.0f} | {memory_ratio:.2f} |",
    ]
    lines += checkpoint_table(root / "checkpoints", reward_model, grpo, ppo)
    lines += scaling(args.quick, root, steps, reward_model, plot=args.write_docs)
    lines += ["", f"Total: {time.perf_counter() - started:.0f} s."]
    report = "\n".join(lines)
    print()
    print(report)
    if args.write_docs:
        write_docs(report)
    return 0


def scaling(quick: bool, root: Path, steps: int, reward_model: Path, plot: bool) -> list[str]:
    """(d) GRPO time per sample and memory against completion length and batch size, with fitted exponents."""
    lengths = [16, 64] if quick else [16, 32, 64, 128]
    batches = [8, 32] if quick else [8, 16, 32]
    print("(d) GRPO scaling")
    rows, by_length, by_batch = [], {}, {}
    for length in lengths:
        for batch in batches:
            overrides = [f"generation.max_new_tokens={length}", f"generation.min_new_tokens={length}",
                         f"training.per_device_batch_size={batch}"]  # fmt: skip
            run = measure(
                "grpo-ours", root / f"scale-{length}-{batch}", max(4, steps // 8), reward_model, overrides
            )
            per_sample = run["seconds_per_step"] / batch
            rows.append(f"| {length} | {batch} | {per_sample * 1000:.2f} | {run['peak_memory_mb']:.0f} |")
            by_length.setdefault(batch, []).append((length, per_sample))
            by_batch.setdefault(length, []).append((batch, per_sample))
            print(f"  length {length}, batch {batch}: {per_sample * 1000:.2f} ms/sample", flush=True)
    length_k = statistics.median(fitted_exponent(*zip(*points, strict=True)) for points in by_length.values())
    batch_k = statistics.median(fitted_exponent(*zip(*points, strict=True)) for points in by_batch.values())
    figure = ["", f"![GRPO time per sample against completion length]({SCALING_PLOT})"] if plot else []
    if plot:
        plot_scaling(by_length, REPO / "docs" / SCALING_PLOT)
    return [
        *figure,
        "",
        "### GRPO scaling (llm_rl, one run each; completions held to their length)",
        "",
        "| completion tokens | batch | ms per sample | peak MB |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        f"Fitted growth of time per sample: length^{length_k:.2f} (at fixed batch), batch^{batch_k:.2f} "
        "(at fixed length; below 0 means larger batches amortise fixed costs).",
    ]


def plot_scaling(by_length: dict[int, list[tuple[int, float]]], path: Path) -> None:
    """Time per sample against completion length, one line per batch size, on log-log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for batch, points in sorted(by_length.items()):
        lengths, seconds = zip(*points, strict=True)
        axes.plot(lengths, [s * 1000 for s in seconds], marker="o", label=f"batch {batch}")
    axes.set(
        xscale="log", yscale="log", xlabel="completion tokens", ylabel="ms per sample", title="GRPO (llm_rl)"
    )
    axes.legend()
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_docs(report: str) -> None:
    """Replace the generated part of docs/benchmarks.md (between the markers) with this run's tables."""
    path = REPO / "docs" / "benchmarks.md"
    start, end = "<!-- benchmark:start -->", "<!-- benchmark:end -->"
    text = path.read_text()
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    path.write_text(f"{head}{start}\n{report}\n{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())

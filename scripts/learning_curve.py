"""Benchmark: train the embedded default for a fixed budget with several seeds and show that reward rises.

    python scripts/learning_curve.py [--algorithm grpo|ppo|rloo] [--seeds 0 1 2] [--set key=value ...]

Each seed runs as its own `recipes/<algorithm>.py` process (wandb off); the table shows, per seed, the
mean `reward/mean` of the first and of the last 20% of logging steps, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llm_rl.algorithms.registry import ALGORITHMS  # noqa: E402
from llm_rl.monitoring.metrics import first_and_last_mean  # noqa: E402
from llm_rl.run_folder import read_rows  # noqa: E402


def run_seed(algorithm: str, seed: int, output_dir: Path, overrides: list[str]) -> float:
    """Train one seed in its own process; returns its wall time in seconds."""
    command = [
        sys.executable,
        str(REPO / "recipes" / f"{algorithm}.py"),
        "--set",
        f"run.seed={seed}",
        "--set",
        f"run.output_dir={output_dir}",
        "--set",
        "monitoring.wandb.mode=disabled",
        "--set",
        "monitoring.progress=false",
        "--set",
        "checkpointing.resume=never",
    ]
    for override in overrides:
        command += ["--set", override]
    started = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="grpo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output-root", type=Path, default=REPO / "runs" / "learning_curve")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    print(f"{'seed':>4}  {'first 20%':>9}  {'last 20%':>8}  {'rise':>6}  {'samples':>7}  {'seconds':>7}")
    for seed in args.seeds:
        output_dir = args.output_root / f"{args.algorithm}-seed{seed}"
        seconds = run_seed(args.algorithm, seed, output_dir, args.overrides)
        first, last = first_and_last_mean(read_rows(output_dir))
        summary = json.loads((output_dir / "run_summary.json").read_text())
        print(
            f"{seed:>4}  {first:>9.3f}  {last:>8.3f}  {last - first:>+6.3f}  {summary['samples']:>7}  {seconds:>7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: GRPO against PPO on the embedded arithmetic task, from the same start, with the same budget.

    python scripts/ab_migration.py [--samples 19200] [--seed 0] [--output runs/ab_migration]

What it measures: both algorithms train the same built-in tiny model (`recipes/arithmetic/grpo.yaml` and
`ppo.yaml`, which share `base.yaml`) with the same seed for the same number of prompt-completion pairs,
each in its own `recipes/<algorithm>.py` process (wandb off; with no --config that script trains
`recipes/arithmetic/<algorithm>.yaml`). `llm-rl compare` then writes plots and a table to
`<output>/report/report.md`: samples to 90% of the best smoothed reward, reward gained per 1,000
samples, throughput, peak memory, best and final reward, final KL and the late reward spread.

This is the prototype stage of a two-stage validation: a cheap A/B on a toy task that checks the
comparison itself (same start, same budget, the measures in the table) before the production A/B on
the production model and data, which this run does not replace.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from learning_curve import run_seed  # noqa: E402

from llm_rl.recipe.load import load_recipe  # noqa: E402
from llm_rl.tools.compare import compare_runs  # noqa: E402

ALGORITHMS = ("grpo", "ppo")


def starting_model() -> str:
    """The policy both recipes start from; stops the benchmark if they differ."""
    policies = {load_recipe(REPO / "recipes" / "arithmetic" / f"{a}.yaml").model.policy for a in ALGORITHMS}
    if len(policies) != 1:
        sys.exit(f"the recipes start from different models: {sorted(policies)}")
    return policies.pop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=19200, help="prompt-completion pairs per algorithm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "ab_migration")
    args = parser.parse_args()

    print(f"start: {starting_model()}, seed {args.seed}, {args.samples} samples each")
    runs = []
    for algorithm in ALGORITHMS:
        output_dir = args.output / algorithm
        seconds = run_seed(algorithm, args.seed, output_dir, [f"training.total_samples={args.samples}"])
        print(f"{algorithm}: trained in {seconds:.1f} s")
        runs.append(output_dir)
    table, report = compare_runs(runs, args.output / "report")
    print(table)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

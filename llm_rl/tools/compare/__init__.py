"""Side-by-side comparison of run folders: `llm-rl compare RUN_DIR ... -o REPORT_DIR`.

Why: deciding between two recipes (GRPO or PPO, one learning rate or another) needs the same numbers,
measured the same way, for every run. The command reads each run folder (`metrics.jsonl`,
`run_summary.json`, `recipe.yaml`), draws one PNG per metric with every run overlaid against
`samples` (the held-out reward among them, when the runs evaluated), and writes `report.md` with the
plots and a table of one column per run.

The parts: `runs` reads the run folders (llm_rl's and TRL's), `measures` computes the table's numbers
and writes the table, `plots` draws the PNGs; this module writes the report.

A value that cannot be computed (a key no row has, no `run_summary.json`, an empty `metrics.jsonl`,
a single row) shows as "n/a (<reason>)"; a folder that is not a run folder is bad input (`DataError`).
"""

from __future__ import annotations

from pathlib import Path

from llm_rl.run_folder import write_atomic
from llm_rl.tools.compare.measures import REWARD, TAIL_FRACTION, TARGET_FRACTION, markdown_table
from llm_rl.tools.compare.plots import PLOTS, plot_metric
from llm_rl.tools.compare.runs import load_runs

REPORT_FILE = "report.md"


def compare_runs(folders: list[Path], report_dir: Path) -> tuple[str, Path]:
    """Read the run folders, write the plots and report.md; returns the table and report.md's path."""
    runs = load_runs(folders)
    report_dir.mkdir(parents=True, exist_ok=True)
    plot_lines = [plot_metric(runs, key, label, report_dir / name) for key, name, label in PLOTS]
    table = markdown_table(runs)
    runs_list = "".join(f"- {run.name}: `{run.folder}`\n" for run in runs)
    report = (
        "# Run comparison\n\n"
        f"{runs_list}\n"
        f"{table}\n"
        f"Smoothed reward: the mean of `{REWARD}` over a trailing window of {TAIL_FRACTION:.0%} of the rows "
        f"(at least one). Samples to {TARGET_FRACTION:.0%}: the first point where the smoothed reward "
        f"reaches start + {TARGET_FRACTION} x (best - start). Reward gained per 1,000 samples: (mean of the "
        f"last {TAIL_FRACTION:.0%} of rows - mean of the first {TAIL_FRACTION:.0%}) / samples x 1000.\n\n"
        "## Plots (against samples)\n\n" + "\n".join(plot_lines)
    )
    path = report_dir / REPORT_FILE
    # report.md last, whole or not at all: a crash never leaves half a report.
    write_atomic(path, report)
    return table, path

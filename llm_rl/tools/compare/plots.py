"""The plots of `llm-rl compare`: one PNG per metric, every run overlaid against `samples`."""

from __future__ import annotations

from pathlib import Path

from llm_rl.tools.compare.measures import EVAL_REWARD, REWARD, points
from llm_rl.tools.compare.runs import Run

# metric key, PNG file name, axis label
PLOTS = (
    (REWARD, "reward.png", "reward (mean)"),
    (EVAL_REWARD, "eval_reward.png", "held-out reward (mean)"),
    ("kl", "kl.png", "KL"),
    ("grad_norm", "grad_norm.png", "gradient norm"),
    ("samples_per_second", "samples_per_second.png", "samples per second"),
)


def plot_metric(runs: list[Run], key: str, label: str, path: Path) -> str:
    """Draw `key` against samples for every run that has it; returns the report's line for the plot."""
    series = [(run, points(run.rows, key)) for run in runs]
    drawn = [(run, curve) for run, curve in series if curve]
    if not drawn:
        return f"- {label}: no plot, no run logs `{key}`.\n"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for run, curve in drawn:
        samples, metric = zip(*curve, strict=True)
        axes.plot(
            samples,
            metric,
            marker="o",
            markersize=3,
            label=f"{run.name} ({run.algorithm or 'unknown algorithm'})",
        )
    axes.set_xlabel("samples (prompt-completion pairs)")
    axes.set_ylabel(label)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    partial = path.with_name(f".{path.name}.partial")
    figure.savefig(partial, format="png", dpi=100)
    plt.close(figure)
    partial.replace(path)
    missing = [run.name for run, curve in series if not curve]
    note = f" (not logged by: {', '.join(missing)})" if missing else ""
    return f"![{label}]({path.name}){note}\n"

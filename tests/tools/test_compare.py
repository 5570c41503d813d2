"""`llm-rl compare`: real GRPO and PPO runs side by side, runs with fields missing, and bad input."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from llm_rl.cli import main
from llm_rl.run.training import train
from llm_rl.run_folder import read_rows
from tests.conftest import in_process_recipe

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("reward.png", "eval_reward.png", "kl.png", "grad_norm.png", "samples_per_second.png")
TARGET_ROW = "samples to 90% of best smoothed reward"
GAIN_ROW = "reward gained per 1,000 samples"
SPREAD_ROW = "reward spread, last 20% of rows (std)"


def parse_table(text: str) -> dict[str, list[str]]:
    """The Markdown comparison table: row label -> one cell per run."""
    table = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] and not cells[0].startswith("---"):
            table[cells[0]] = cells[1:]
    return table


def compare(capsys: pytest.CaptureFixture, report: Path, *runs: Path) -> dict[str, list[str]]:
    """Run `llm-rl compare` in-process; returns the table it printed."""
    assert main(["compare", *map(str, runs), "-o", str(report)]) == 0
    printed = capsys.readouterr().out
    assert f"report: {report / 'report.md'}" in printed
    return parse_table(printed)


def write_run(folder: Path, rows: list[dict], summary: dict | None = None) -> Path:
    """A hand-written run folder: metrics.jsonl with these rows, and run_summary.json when given."""
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if summary is not None:
        (folder / "run_summary.json").write_text(json.dumps(summary))
    return folder


def table_column(table: dict[str, list[str]], column: int) -> list[str]:
    return [cells[column] for cells in table.values()]


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """4 small updates of the embedded task with each algorithm, in-process, evaluated at the start and
    every 2 updates."""
    root = tmp_path_factory.mktemp("compare")
    for algorithm in ("grpo", "ppo"):
        train(
            in_process_recipe(
                algorithm,
                root / algorithm,
                "training.max_steps=4",
                "checkpointing.resume=never",
                "evaluation.at_start=true",
                "evaluation.every=2",
                "data.arithmetic.num_eval=8",
            )
        )
    return root / "grpo", root / "ppo"


def test_compare_two_real_runs(real_runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    report = tmp_path / "report"
    table = compare(capsys, report, *real_runs)

    text = (report / "report.md").read_text()
    assert parse_table(text) == table, "report.md holds the table the command printed"
    for name in PLOTS:
        assert (report / name).read_bytes()[:8] == PNG_MAGIC, name
        assert f"]({name})" in text
    assert not list(report.glob(".*partial")), "no half-written files are left behind"

    for column, run in enumerate(real_runs):
        rows = read_rows(run)
        summary = json.loads((run / "run_summary.json").read_text())
        rewards = [row["reward/mean"] for row in rows if "reward/mean" in row]
        held_out = [row["eval/reward/mean"] for row in rows if "eval/reward/mean" in row]
        rates = [row["samples_per_second"] for row in rows if row["samples_per_second"] is not None]

        def cell(label: str, column: int = column) -> str:
            return table[label][column]

        assert cell("algorithm") == summary["algorithm"] == run.name
        assert cell("status") == summary["status"] == "completed"
        assert cell("samples") == str(summary["samples"])
        assert cell("peak memory (MB)") == f"{max(row['peak_memory_mb'] for row in rows):.1f}"
        assert cell("samples/s (mean)") == f"{statistics.fmean(rates):.1f}", "the start row has no rate"
        assert [row["step"] for row in rows if "eval/reward/mean" in row] == [0, 2, 4]
        assert cell("held-out reward, first evaluation") == f"{held_out[0]:.4f}"
        assert cell("held-out reward, last evaluation") == f"{held_out[-1]:.4f}"
        assert cell("held-out reward gain (last - first)") == f"{held_out[-1] - held_out[0]:+.4f}"
        assert cell("best reward") == f"{summary['best_reward']:.4f}" == f"{max(rewards):.4f}"
        assert cell("final reward") == f"{summary['final_reward']:.4f}" == f"{rewards[-1]:.4f}"
        # 4 rows: the smoothing window is one row, so the gain is (last - first) reward per 1,000 samples.
        assert cell(GAIN_ROW) == f"{(rewards[-1] - rewards[0]) / summary['samples'] * 1000:+.4f}"
    kl = [row["kl"] for row in read_rows(real_runs[1]) if row.get("kl") is not None]
    assert table["KL at the end"][1] == f"{kl[-1]:.4g}", "PPO logs its KL even with no KL penalty"
    assert table["KL at the end"][0] == "n/a (no kl in metrics.jsonl)", "GRPO with beta 0 logs no KL"


def test_smoothing_and_missing_fields(tmp_path: Path, capsys) -> None:
    """Negative rewards that step up halfway; no kl or grad_norm; a run without a summary; an empty run."""
    rewards = [-2.0] * 4 + [-1.0] * 6
    rows = [{"step": i + 1, "samples": 10 * (i + 1), "reward/mean": r} for i, r in enumerate(rewards)]
    shaped = write_run(
        tmp_path / "shaped", rows, {"status": "completed", "algorithm": "grpo", "samples": 100}
    )
    single = write_run(tmp_path / "single", rows[:1])
    empty = write_run(tmp_path / "empty", [])
    report = tmp_path / "report"
    table = compare(capsys, report, shaped, single, empty)

    # Window of 2 rows (20% of 10): the smoothed reward is -2, -2, -2, -1.5, -1, ...; the target
    # -2 + 0.9 * (-1 - -2) = -1.1 is first reached at row 6 (60 samples), one row after the raw reward.
    assert table[TARGET_ROW][0] == "60"
    assert table[GAIN_ROW][0] == "+10.0000", "(-1 - -2) / 100 samples * 1000"
    assert table[SPREAD_ROW][0] == "0.0000"
    assert table["best reward"][0] == "-1.0000"
    assert table["KL at the end"][0] == "n/a (no kl in metrics.jsonl)"
    assert table["held-out reward gain (last - first)"][0] == "n/a (no eval/reward/mean in metrics.jsonl)"
    assert table["peak memory (MB)"][0] == "n/a (no peak_memory_mb in metrics.jsonl)"

    assert table["status"][1] == "n/a (no run_summary.json)"
    assert table["samples"][1] == "10", "without a summary, the last metrics row's count"
    assert table[TARGET_ROW][1] == "n/a (a single row with reward/mean)"
    assert table["final reward"][1] == "-2.0000"

    assert all(cell.startswith("n/a (") for cell in table_column(table, 2)), table
    assert table["samples"][2] == "n/a (empty metrics.jsonl)"

    text = (report / "report.md").read_text()
    assert "no plot, no run logs `kl`" in text
    assert "no plot, no run logs `grad_norm`" in text
    assert "no plot, no run logs `eval/reward/mean`" in text
    assert not (report / "kl.png").exists()
    assert (report / "reward.png").read_bytes()[:8] == PNG_MAGIC


# What TRL 1.12's PPOTrainer wrote into its last checkpoint, recorded with the TRL parity fixture.
TRL_OUTPUT = Path(__file__).resolve().parents[1] / "fixtures" / "trl_ppo_parity" / "trl_output"


def test_a_trl_ppo_output_folder_compares_beside_an_llm_rl_run(
    real_runs: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    """An old TRL run (its checkpoint's log history) and an llm_rl run, on one axis under one set of names."""
    history = json.loads((TRL_OUTPUT / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    report = tmp_path / "report"
    table = compare(capsys, report, TRL_OUTPUT, real_runs[1])
    assert table["algorithm"] == ["ppo (TRL)", "ppo"]
    assert table["samples"][0] == str(history[-1]["episode"]) == "16"
    assert table["final reward"][0] == f"{history[-1]['objective/scores']:.4f}"
    assert table["best reward"][0] == f"{max(row['objective/scores'] for row in history):.4f}"
    assert table["KL at the end"][0] == f"{history[-1]['objective/kl']:.4g}"
    assert table["samples/s (mean)"][0] == f"{statistics.fmean(row['eps'] for row in history):.1f}"
    assert table["status"][0] == "n/a (no run_summary.json)"
    assert table["peak memory (MB)"][0] == "n/a (no peak_memory_mb in checkpoint-2/trainer_state.json)"
    for name in ("reward.png", "kl.png", "samples_per_second.png"):
        assert (report / name).read_bytes()[:8] == PNG_MAGIC, name


def test_a_trainer_state_without_ppo_rows_is_bad_input(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "sft-run"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": [{"loss": 1.0, "step": 1}]}))
    assert main(["compare", str(folder), "-o", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its log_history has no PPO update rows" in err, err


@pytest.mark.parametrize("case", ["missing folder", "folder with no run files"])
def test_bad_run_folder_exits_2_with_one_line(tmp_path: Path, capsys, case: str) -> None:
    folder = tmp_path / "run"
    if case == "folder with no run files":
        folder.mkdir()
    assert main(["compare", str(folder), "-o", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {folder}: "), err
    assert "Traceback" not in err

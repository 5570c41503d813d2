"""scripts/gpu_check.py: refuses without a GPU unless asked, runs end to end on a CPU when asked, and on
a GPU host prints throughput and memory for both algorithms, and with --overhead our GRPO's cost over
TRL's and our PPO's update by phase."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, run_entry

sys.path.insert(0, str(REPO / "scripts"))

from benchmark import PPO_PHASES  # noqa: E402

SCRIPT = "scripts/gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_refuses_without_a_gpu(tmp_path: Path) -> None:
    result = run_entry([SCRIPT, "--output", str(tmp_path)], timeout=60)
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr and "Traceback" not in result.stderr


def is_table_row(line: str) -> bool:
    """A row of the throughput table: a name at the start of the line, then one number per algorithm."""
    cells = line.split()
    if line.startswith(" ") or len(cells) < 3:
        return False
    try:
        [float(cell) for cell in cells[-2:]]
    except ValueError:
        return False
    return True


def check_table(stdout: str) -> dict[str, list[float]]:
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split() == ["grpo", "ppo"])
    table = list(itertools.takewhile(is_table_row, lines[lines.index(header) + 1 :]))
    values = {line.rsplit(None, 2)[0].strip(): [float(v) for v in line.split()[-2:]] for line in table}
    for name in ("samples/s", "tokens/s", "peak memory (MB)"):
        assert all(value > 0 for value in values[name]), name
    return values


def overhead_rows(stdout: str) -> dict[str, list[str]]:
    """The overhead table's rows by name: the cells after the name."""
    rows = [
        line.strip("|").split("|")
        for line in stdout.splitlines()
        if line.startswith("| ") and "---" not in line
    ]
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows if cells[0].strip()}


def test_runs_both_algorithms_on_a_cpu_when_asked(tmp_path: Path) -> None:
    args = [SCRIPT, "--allow-cpu", "--steps", "3", "--layers", "1", "--hidden", "64", "--new-tokens", "8",
            "--overhead", "--repeats", "1"]  # fmt: skip
    result = run_entry([*args, "--output", str(tmp_path)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # EOS is held back: both algorithms' completions run to --new-tokens.
    assert check_table(result.stdout)["completion tokens"] == [8.0, 8.0]
    assert (tmp_path / "grpo" / "run_summary.json").exists() and (
        tmp_path / "ppo" / "run_summary.json"
    ).exists()
    rows = overhead_rows(result.stdout)
    cells = rows["GRPO"]
    raw_ms, ours_ms, wall_ratio = float(cells[0]), float(cells[1]), float(cells[2].split()[0].strip("*"))
    assert wall_ratio == pytest.approx(ours_ms / raw_ms, rel=0.01), "one pair: its ratio is the medians'"
    assert float(cells[-1].strip("*")) > 0.5, "memory ratio"
    assert set(PPO_PHASES) <= set(rows), "PPO's update by phase"
    assert all(float(rows[phase][0]) > 0 for phase in PPO_PHASES)


@pytest.mark.gpu
def test_gpu_check_on_a_gpu(tmp_path: Path) -> None:
    args = [SCRIPT, "--overhead", "--repeats", "1", "--output", str(tmp_path)]
    result = run_entry(args, timeout=1200, launcher=[sys.executable])
    assert result.returncode == 0, result.stderr[-3000:]
    check_table(result.stdout)
    assert {"GRPO", *PPO_PHASES} <= set(overhead_rows(result.stdout))

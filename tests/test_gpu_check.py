"""scripts/gpu_check.py: refuses without a GPU unless asked, runs end to end on a CPU when asked, and on
a GPU host prints throughput and memory for both algorithms."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conftest import run_entry

SCRIPT = "scripts/gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_refuses_without_a_gpu(tmp_path: Path) -> None:
    result = run_entry([SCRIPT, "--output", str(tmp_path)], timeout=60)
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr and "Traceback" not in result.stderr


def check_table(stdout: str) -> dict[str, list[float]]:
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split() == ["grpo", "ppo"])
    table = lines[lines.index(header) + 1 :]
    values = {line.rsplit(None, 2)[0].strip(): [float(v) for v in line.split()[-2:]] for line in table}
    for name in ("samples/s", "tokens/s", "peak memory (MB)"):
        assert all(value > 0 for value in values[name]), name
    return values


def test_runs_both_algorithms_on_a_cpu_when_asked(tmp_path: Path) -> None:
    args = [SCRIPT, "--allow-cpu", "--steps", "2", "--layers", "1", "--hidden", "64", "--new-tokens", "8"]
    result = run_entry([*args, "--output", str(tmp_path)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # EOS is held back: GRPO's completions run to --new-tokens. TRL's PPO ends a response at its first
    # pad token, which this random model samples now and then.
    grpo_tokens, ppo_tokens = check_table(result.stdout)["completion tokens"]
    assert grpo_tokens == 8.0 and 0 < ppo_tokens <= 8.0
    assert (tmp_path / "grpo" / "run_summary.json").exists() and (
        tmp_path / "ppo" / "run_summary.json"
    ).exists()


@pytest.mark.gpu
def test_gpu_check_on_a_gpu(tmp_path: Path) -> None:
    result = run_entry([SCRIPT, "--output", str(tmp_path)], timeout=600, launcher=[sys.executable])
    assert result.returncode == 0, result.stderr[-3000:]
    check_table(result.stdout)

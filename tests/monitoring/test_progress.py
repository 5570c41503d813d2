"""What a run prints: step lines and the summary in a log file, progress bars only at a terminal.

The embedded default runs for a few updates in a fresh process, once with its output piped (a log file)
and once on a pseudo-terminal (a person watching). Bytes are read as written: a progress bar redraws
itself with carriage returns, which text mode would turn into newlines.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.conftest import REPO

FEW_UPDATES = ["--set", "training.max_steps=4", "--set", "monitoring.wandb.mode=disabled"]


def embedded_default(output_dir: Path) -> list[str]:
    return [sys.executable, "recipes/ppo.py", *FEW_UPDATES, "--set", f"run.output_dir={output_dir}"]


def test_piped_output_has_step_lines_and_no_bar_frames(tmp_path: Path) -> None:
    result = subprocess.run(
        embedded_default(tmp_path / "run"), cwd=REPO, capture_output=True, timeout=300, env=os.environ.copy()
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    assert "\r" not in stdout and "\r" not in stderr
    assert "it/s" not in stdout + stderr and "Loading weights" not in stdout + stderr
    steps = [line for line in stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["1", "2", "3", "4"]
    assert stdout.splitlines()[-1].startswith("completed: 4 steps")


def test_a_terminal_keeps_the_progress_bar(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    # 24 rows x 100 columns: a bar sized to the terminal needs a width.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        embedded_default(tmp_path / "run"), cwd=REPO, stdout=follower, stderr=follower, env=os.environ.copy()
    )
    os.close(follower)
    written = bytearray()
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        written += chunk
    assert process.wait(timeout=300) == 0, written.decode(errors="replace")[-2000:]
    os.close(leader)
    text = written.decode(errors="replace").replace("\r\n", "\n")  # the terminal's own line ends
    assert "\r" in text and "4/4" in text
    assert "completed: 4 steps" in text


def test_every_command_piped_prints_no_bar_frames(tmp_path: Path) -> None:
    """`llm-rl validate` loads the model and tokenizes prompts, which draw bars at a terminal."""
    command = [sys.executable, "-m", "llm_rl.cli", "validate", "recipes/arithmetic/ppo.yaml"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, timeout=300, env=os.environ.copy())
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"\r" not in result.stdout + result.stderr
    assert "recipe OK: PPO" in result.stdout.decode()


def test_progress_line_prints_every_evaluation_between_its_cadence(capsys) -> None:
    from llm_rl.monitoring.progress import ProgressLine

    line = ProgressLine(total_rows=40, lines=4)  # a line every 10 rows
    line({"step": 0, "samples": 0, "eval/reward/mean": 0.355})
    for step in range(1, 13):
        row = {"step": step, "samples": 16 * step, "reward/mean": 0.25}
        line({**row, "eval/reward/mean": 0.5} if step == 8 else row)
    printed = capsys.readouterr().out.splitlines()
    assert [text.split()[1] for text in printed] == ["0", "8", "10"]
    assert "eval/reward/mean 0.355" in printed[0] and "eval/reward/mean 0.5" in printed[1]

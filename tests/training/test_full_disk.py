"""A disk that fills up under a run: the checkpoint that does not fit stops the run with one line, the one
before it is untouched, and once there is room the same command resumes from it.

The run folder is on a real filesystem of its own, a small tmpfs, filled by a file that leaves less room
than a checkpoint takes (mounting needs root, as on CI's machine; elsewhere the test is skipped).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from llm_rl.training.checkpoint_files import check_checkpoint
from llm_rl.training.checkpoints import STAGING_DIR, list_checkpoints
from llm_rl.training.disk_space import folder_size, is_out_of_space
from tests.conftest import entry, rows, run_entry

EVERY_TWO_STEPS = ["checkpointing.every=2", "checkpointing.unit=steps"]


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 MiB tmpfs of its own at `tmp_path/disk`."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], check=True)


def fill(disk: Path, leave: int) -> Path:
    """Take all but `leave` bytes of the disk's free space with one file."""
    ballast = disk / "ballast"
    with ballast.open("wb") as file:
        os.posix_fallocate(file.fileno(), 0, os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - leave)
    return ballast


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_checkpoint_that_does_not_fit_stops_the_run_and_loses_the_previous_one_nothing(
    small_disk: Path, algorithm: str
) -> None:
    run = small_disk / "run"
    first = run_entry(entry(algorithm, run, "training.max_steps=2", *EVERY_TWO_STEPS))
    assert first.returncode == 0, first.stderr[-3000:]
    (kept,) = list_checkpoints(run)
    ballast = fill(small_disk, leave=folder_size(kept) // 2)

    # The budget raised: training goes on from the checkpoint, and the next one does not fit.
    command = entry(algorithm, run, "training.max_steps=6", *EVERY_TWO_STEPS)
    full = run_entry(command)
    assert full.returncode == 1, full.stderr[-3000:]
    assert "Traceback" not in full.stderr
    assert f"warning: {run} has " in full.stderr and "the next checkpoint will not fit" in full.stderr
    failed = [line for line in full.stderr.splitlines() if line.startswith("training failed:")]
    assert len(failed) == 1 and failed[0].startswith(
        f"training failed: no space left on the device of {run} "
    )
    assert failed[0].endswith(
        f"the last complete checkpoint, {kept.name}, is untouched; free space and run the same command "
        "again: it resumes from there"
    )
    assert list_checkpoints(run) == [kept] and not (run / STAGING_DIR).exists(), "nothing half-written kept"
    check_checkpoint(kept)
    assert json.loads((run / "run_summary.json").read_text())["status"] == "failed"

    ballast.unlink()
    resumed = run_entry(command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run_summary.json").read_text())["status"] == "completed"
    assert [row["step"] for row in rows(run)] == list(range(1, 7)), "no gap, no duplicate"


def test_only_a_full_run_folder_counts_as_a_full_disk(small_disk: Path, tmp_path: Path) -> None:
    """A full /dev/shm elsewhere keeps its own error; torch's writer, which names no file, counts when a
    probe write into the run folder fails too."""
    run = small_disk / "run"
    run.mkdir()
    elsewhere = OSError(errno.ENOSPC, "No space left on device", "/dev/shm/torch_1234")
    torch_writer = RuntimeError(
        "[enforce fail at inline_container.cc:672] . unexpected pos 2531968 vs 2531856"
    )
    assert not is_out_of_space(elsewhere, run)
    assert is_out_of_space(OSError(errno.ENOSPC, "No space left on device", str(run / "x")), run)
    assert not is_out_of_space(torch_writer, run), "room left: another cause"
    ballast = fill(small_disk, leave=0)
    assert is_out_of_space(torch_writer, run)
    ballast.unlink()
    assert not list(run.iterdir()), "the probe leaves nothing behind"

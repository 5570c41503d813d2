"""What training and export write follows the user's umask: on a shared cluster a group reads the
checkpoints, the final model and exports. safetensors alone writes weights 0600, and temporary folders
are made 0700."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LLM_RL, REPO, entry


def run_under_umask(command: list[str], umask: int) -> None:
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, env=os.environ.copy(), umask=umask
    )
    assert result.returncode == 0, result.stderr[-3000:]


def modes(folder: Path) -> dict[str, str]:
    """Each path under `folder` (and the folder itself) with its permission bits, in octal."""
    return {
        str(path.relative_to(folder.parent)): oct(path.stat().st_mode & 0o777)
        for path in [folder, *folder.rglob("*")]
    }


def assert_modes(folder: Path, file_mode: int, folder_mode: int) -> None:
    found = modes(folder)
    wrong = {
        name: mode
        for name, mode in found.items()
        if mode != oct(folder_mode if (folder.parent / name).is_dir() else file_mode)
    }
    assert len(found) > 3 and not wrong, wrong


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_checkpoints_the_final_model_and_an_export_follow_the_umask(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    steps = ["training.max_steps=1", "checkpointing.every=1", "checkpointing.unit=steps"]
    run_under_umask([sys.executable, *entry(algorithm, run, *steps)], umask=0o002)
    (checkpoint,) = run.glob("checkpoint-*")
    for folder in (checkpoint, run / "final"):
        assert_modes(folder, 0o664, 0o775)
    assert any(path.suffix == ".safetensors" for path in (run / "final").rglob("*"))

    exported = tmp_path / "exported"
    run_under_umask([LLM_RL, "export", str(run), "-o", str(exported)], umask=0o027)
    assert_modes(exported, 0o640, 0o750)

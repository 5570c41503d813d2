"""The run folder's layout: the names of its files and folders, and how they are written and read.

`output_dir` holds `recipe.yaml` (the resolved recipe as run), `metrics.jsonl` (a row per logging
step), `checkpoint-<samples>/`, `final/` (a `save_pretrained` policy and tokenizer; PPO's critic in
`value_model/`), `run_summary.json`, and for a staged run `stages/NN-name/`, one run folder a stage.
`.lock` holds the pid of the training that writes the folder (`RunFolderLock`).
Training writes it (`llm_rl.run.training`); the tools (doctor, compare, export, sample) read it through here.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

from llm_rl.errors import UserInputError

RECIPE_FILE = "recipe.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "run_summary.json"
FINAL_DIR = "final"
# PPO's critic, inside `final/` and every checkpoint.
VALUE_MODEL_DIR = "value_model"
STAGES_DIR = "stages"
LOCK_FILE = ".lock"


def write_atomic(path: Path, text: str) -> None:
    """Write a file whole or not at all: a crash never leaves half of it."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def current_umask() -> int:
    """The process's umask: from /proc where Linux has it, else by setting one and putting it back (the
    stricter one set meanwhile can only make a file another thread creates more private)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def apply_umask(folder: Path) -> None:
    """Give `folder` and everything under it the modes the user's umask gives new files and folders.

    safetensors writes weights 0600 and `tempfile.mkdtemp` makes folders 0700, whatever the umask: on a
    shared cluster the user's group could not read a checkpoint, a final model or an export. Execute bits
    a file has are kept (DeepSpeed's `zero_to_fp32.py`); paths already right are not touched (a metadata
    write each, costly on Lustre). Best effort: a filesystem that refuses modes (object-store mounts,
    root-squashed NFS) leaves them as they are, with one warning.
    """
    mask = current_umask()
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        try:
            mode = path.stat().st_mode & 0o777
            wanted = (0o777 if path.is_dir() or mode & 0o111 else 0o666) & ~mask
            if mode != wanted:
                path.chmod(wanted)
        except OSError as err:
            print(f"warning: {folder}: file modes left as they are ({err})", file=sys.stderr)
            return


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """The metric rows of a run folder."""
    path = folder / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reward_series(folder: Path) -> list[float]:
    """`reward/mean` of every metric row that has one: what best_reward and final_reward are read from."""
    return [row["reward/mean"] for row in read_rows(folder) if row.get("reward/mean") is not None]


def checkpoint_step(checkpoint: Path) -> int:
    """The optimizer step a checkpoint was saved at."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return int(state["global_step"])


def stage_folder(run_folder: Path, index: int, name: str) -> Path:
    """Where stage `index` of a staged run trains: `RUN/stages/NN-name`."""
    return run_folder / STAGES_DIR / f"{index:02d}-{name}"


class RunFolderLock:
    """One training at a time per run folder: an exclusive `flock` on `.lock`, which holds the pid.

    The operating system drops the lock when its process ends, however it ends (a `kill -9` included), so
    a stale lock never blocks the next run; a second training while the first lives is refused, naming
    the first's pid (a training child left running after its launcher was killed, say).
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_FILE
        self.handle = open(path, "a+")  # noqa: SIM115 - held open for the run's lifetime
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "unknown"
            self.handle.close()
            raise UserInputError(
                f"another training (pid {holder}) is writing this run folder; stop it first, or set "
                "run.output_dir to train elsewhere",
                where=str(folder),
            ) from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"{os.getpid()}\n")
        self.handle.flush()

    def release(self) -> None:
        """Let the next training in (the file stays: removing it could race a waiting process)."""
        if not self.handle.closed:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()

"""A full disk under a run: found in whichever form the writer reports it, said in one line, and warned
of one checkpoint ahead.

Writers report a full disk (or an exceeded quota) differently: Python's own writes as `OSError` with
errno ENOSPC or EDQUOT and the file's name, safetensors as `SafetensorError: ... No space left on device
(os error 28)`, and `torch.save` (optimizer, RNG and DeepSpeed states) as a bare `RuntimeError` from its
zip writer (`[enforce fail at inline_container.cc] ... unexpected pos`), with the errno lost. An error
naming a file counts when the file is in the run folder; one that names none counts when a small probe
write into the run folder fails for want of space too. So a full /dev/shm, /tmp or cache elsewhere keeps
its own message, and a quota or a full Lustre target, which free-space figures do not show, is found.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path

from llm_rl.errors import TrainingFailure, causes
from llm_rl.training.checkpoint_files import manifest

OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
OUT_OF_SPACE_WORDS = ("no space left on device", "disk quota exceeded", "storagefull", "os error 28")
# torch's zip writer, which reports a failed write without its cause.
TORCH_WRITER_WORDS = ("inline_container", "pytorchstreamwriter", "file write failed")
# What the probe writes (and removes): more than a filesystem's block, less than any checkpoint.
PROBE_BYTES = 2**20
PROBE_FILE = ".llm_rl-space-probe"


class DiskFull(TrainingFailure):
    """A write of the run failed for want of space."""


def free_bytes(path: Path) -> int:
    """The space left to this user on the filesystem holding `path` (or its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def in_gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**28 else f"{size / 2**20:.1f} MiB"


def is_out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether `err` is a write into `folder` that failed because its filesystem is full (or the user's
    quota on it is spent)."""
    for cause in causes(err):
        if isinstance(cause, OSError) and cause.errno in OUT_OF_SPACE_ERRNOS and cause.filename:
            return is_within(Path(str(cause.filename)), folder)
        text = str(cause).lower()
        if any(words in text for words in (*OUT_OF_SPACE_WORDS, *TORCH_WRITER_WORDS)) or (
            isinstance(cause, OSError) and cause.errno in OUT_OF_SPACE_ERRNOS
        ):
            return not room_to_write(folder)
    return False


def is_within(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def room_to_write(folder: Path) -> bool:
    """Whether a small write into `folder` (flushed to the device) succeeds, or fails for another reason
    than space."""
    probe = folder / PROBE_FILE
    try:
        with probe.open("wb") as file:
            file.write(bytes(PROBE_BYTES))
            file.flush()
            os.fsync(file.fileno())
    except OSError as err:
        return err.errno not in OUT_OF_SPACE_ERRNOS
    finally:
        probe.unlink(missing_ok=True)
    return True


def disk_full_message(folder: Path, last_checkpoint: Path | None) -> str:
    """One line: where space ran out, what was kept, what to do."""
    usage = shutil.disk_usage(folder)
    kept = (
        f"the last complete checkpoint, {last_checkpoint.name}, is untouched; free space and run the same "
        "command again: it resumes from there"
        if last_checkpoint is not None
        else "there is no checkpoint yet; free space and run the same command again"
    )
    return (
        f"no space left on the device of {folder} ({in_gib(usage.free)} free of {in_gib(usage.total)} once "
        f"the write in progress was dropped): {kept}"
    )


def folder_size(folder: Path) -> int:
    """Bytes of every file under `folder` (a checkpoint's `manifest`, summed)."""
    return sum(manifest(folder).values())


def warn_if_no_room(checkpoint: Path) -> None:
    """Warn on stderr when the next checkpoint will not fit beside `checkpoint` (a checkpoint is written
    whole before an older one is rotated out): hours ahead of the failure, on a slow cadence."""
    needed = folder_size(checkpoint)
    free = free_bytes(checkpoint)
    if free < needed:
        print(
            f"warning: {checkpoint.parent} has {in_gib(free)} free and {checkpoint.name} takes "
            f"{in_gib(needed)}: the next checkpoint will not fit. Free space, or move the run folder",
            file=sys.stderr,
            flush=True,
        )

"""A full disk under a run: found in whichever form the writer reports it, said in one line, and warned
of one checkpoint ahead.

Writers report a full disk (or an exceeded quota) differently: Python's own writes as `OSError` with
errno ENOSPC, safetensors as `SafetensorError: ... No space left on device (os error 28)`, and
`torch.save` (optimizer, RNG and DeepSpeed states) as a bare `RuntimeError` from its zip writer
(`[enforce fail at inline_container.cc] ... unexpected pos`), with the errno lost. That last one counts
as a full disk only when the disk is in fact (nearly) full.
"""

from __future__ import annotations

import errno
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from llm_rl.errors import TrainingFailure

OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
OUT_OF_SPACE_WORDS = ("no space left on device", "disk quota exceeded", "storagefull", "os error 28")
# torch's zip writer, which reports a failed write without its cause.
TORCH_WRITER_WORDS = ("inline_container", "pytorchstreamwriter", "file write failed")
# Below this, a disk is full for any write a checkpoint makes.
NEARLY_FULL_BYTES = 64 * 2**20


class DiskFull(TrainingFailure):
    """A write of the run failed for want of space."""


def free_bytes(path: Path) -> int:
    """The space left to this user on the filesystem holding `path` (or its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def in_gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**28 else f"{size / 2**20:.1f} MiB"


def causes(err: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or during, each once."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def is_out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether `err` is a write into `folder` that failed because its filesystem is full."""
    for cause in causes(err):
        if isinstance(cause, OSError) and cause.errno in OUT_OF_SPACE_ERRNOS:
            return True
        text = str(cause).lower()
        if any(words in text for words in OUT_OF_SPACE_WORDS):
            return True
        if any(words in text for words in TORCH_WRITER_WORDS) and free_bytes(folder) < NEARLY_FULL_BYTES:
            return True
    return False


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
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


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

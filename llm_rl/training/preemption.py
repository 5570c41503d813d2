"""Preemption: SIGTERM or SIGUSR1 ends a run cleanly at the next update boundary, with a checkpoint.

Spot instances and Slurm stop a job with SIGTERM and a grace period (Slurm can send SIGUSR1 first, with
`--signal=USR1@SECONDS`). transformers' and TRL's trainers ignore the signal, so every preemption would
lose the work since the last checkpoint. Here the first signal is noted and the update in progress
finishes; at its end the run writes a checkpoint outside the usual cadence and stops, with status
`preempted` and exit code 75 (`EX_TEMPFAIL`: try again). `resume: auto` then continues from that
checkpoint, no sample lost. A repeated signal changes nothing: under `accelerate launch` with several
processes, torchrun's agent passes on to its workers the SIGTERM that the scheduler also sent them, and
stops them with SIGKILL when its own grace period (`TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, 30 s by default)
runs out. Checkpoints are written aside and renamed into place (`llm_rl.training.checkpoints`), so the
previous one is intact whenever SIGKILL comes.

Under several processes each one may get the signal at a different moment (or only some of them do), so
at every update's end the processes agree on it in one all-reduce of a flag: they save and stop at the
same update.
"""

from __future__ import annotations

import itertools
import signal
import sys
import time
from types import FrameType

import torch
from transformers import TrainerCallback

# The signals a scheduler sends before it kills a job.
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preemption(TrainerCallback):
    """Notes a stop signal and, at the end of the update in progress, asks for a checkpoint and a stop."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.received_at: float | None = None
        self.copies = itertools.count()  # the signals handled so far
        self.stopped = False
        self.previous: dict[int, object] = {}

    def install(self) -> None:
        """Handle the stop signals in this process (the main thread's; a no-op elsewhere)."""
        for number in SIGNALS:
            try:
                self.previous[number] = signal.signal(number, self.on_signal)
            except ValueError:  # not the main thread
                return

    def uninstall(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous = {}

    def on_signal(self, number: int, frame: FrameType | None) -> None:
        # Python runs a handler again between any two bytecodes of a running one: a copy arriving while
        # this one runs must find itself counted. `next` on the counter is one C call, so no copy slips
        # between the check and the count.
        if next(self.copies) > 0:
            # torchrun's agent passes on the signal the scheduler already sent to every process of the job:
            # a repeat changes nothing (SIGKILL at the end of the grace period is what ends a stuck run).
            print(f"{signal.Signals(number).name} again: already stopping", file=sys.stderr, flush=True)
            return
        self.signal_name = signal.Signals(number).name
        self.received_at = time.monotonic()
        print(
            f"{self.signal_name} received: finishing the update in progress, then a checkpoint and a stop",
            file=sys.stderr,
            flush=True,
        )

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested_anywhere(args):
            control.should_save = True
            control.should_training_stop = True
            self.stopped = True
        return control

    def requested_anywhere(self, args) -> bool:
        """Whether any process has had a stop signal (one all-reduce when there are several)."""
        local = self.received_at is not None
        if args.world_size <= 1 or not torch.distributed.is_initialized():
            return local
        flag = torch.tensor([1.0 if local else 0.0], device=args.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def seconds_since_signal(self) -> float | None:
        return None if self.received_at is None else time.monotonic() - self.received_at

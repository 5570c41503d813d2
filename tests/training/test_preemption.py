"""The preemption callback in this process: real signals, one note per stop, a repeat changes nothing."""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import pytest
from transformers import TrainerControl

from llm_rl.training.preemption import Preemption


@pytest.fixture
def preemption():
    callback = Preemption()
    callback.install()
    yield callback
    callback.uninstall()


def deliver(number: signal.Signals) -> None:
    """Send a signal to this process and let Python run its handler."""
    os.kill(os.getpid(), number)
    time.sleep(0.01)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_is_noted_and_the_update_in_progress_ends_the_run(preemption, stop, capsys) -> None:
    deliver(stop)
    assert preemption.signal_name == stop.name
    assert f"{stop.name} received: finishing the update in progress" in capsys.readouterr().err

    control = preemption.on_step_end(SimpleNamespace(world_size=1), None, TrainerControl())
    assert control.should_save and control.should_training_stop and preemption.stopped


def test_a_repeated_signal_changes_nothing(preemption, capsys) -> None:
    """torchrun's agent passes on the SIGTERM the scheduler also sent: the first one's time stands."""
    deliver(signal.SIGTERM)
    first = preemption.received_at
    deliver(signal.SIGTERM)
    deliver(signal.SIGUSR1)
    assert (preemption.signal_name, preemption.received_at) == ("SIGTERM", first)
    err = capsys.readouterr().err
    assert err.count("received:") == 1
    assert "SIGTERM again: already stopping" in err and "SIGUSR1 again: already stopping" in err


def test_a_copy_arriving_while_the_handler_runs_is_a_repeat(preemption, capsys, monkeypatch) -> None:
    """Python may run the handler again inside a running one: the launcher's copy of the signal, arriving
    just after the scheduler's, is still noted once (two 'received' lines from one process, seen in CI)."""
    clock = time.monotonic

    def second_copy_arrives() -> float:
        monkeypatch.setattr(time, "monotonic", clock)
        deliver(signal.SIGTERM)  # runs the handler again, nested in the first
        return clock()

    monkeypatch.setattr(time, "monotonic", second_copy_arrives)
    deliver(signal.SIGTERM)
    err = capsys.readouterr().err
    assert err.count("received:") == 1 and err.count("SIGTERM again: already stopping") == 1
    assert preemption.received_at is not None


def test_without_a_signal_training_goes_on(preemption) -> None:
    control = preemption.on_step_end(SimpleNamespace(world_size=1), None, TrainerControl())
    assert not (control.should_save or control.should_training_stop or preemption.stopped)
    assert preemption.seconds_since_signal() is None


def test_uninstall_gives_the_signals_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    callback = Preemption()
    callback.install()
    assert signal.getsignal(signal.SIGTERM) == callback.on_signal
    callback.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before

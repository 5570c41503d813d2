"""Alerts on the metric rows (`monitoring.alerts`): exploding gradients, KL blow-ups, value-loss
explosions, a collapsed reward spread, and NaN or inf.

Each alert that fires is printed with its step, written into the row as `alerts/<name>` = 1 (so
metrics.jsonl, wandb and TensorBoard carry it), and sent as a wandb alert when wandb is online. A `stop`
alert ends the run with status `stopped_by_alert` after a checkpoint of the last good state: weights
that are not finite are never saved (the previous checkpoint is then the last good state).
Rows exist on the main process only; the decision to stop is shared with every rank.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from llm_rl.schema import AlertsSection
from llm_rl.training.early_stopping import share_from_main_process

# The row keys each bound alert reads.
BOUND_METRICS = {
    "grad_norm": "grad_norm",
    "kl": "kl",
    "value_loss": "loss/value",
    "gpu_temperature": "gpu/temperature_c",
    "ecc_errors": "gpu/ecc_errors",
}
# Keys whose NaN or inf (None in a row) fires the `nonfinite` alert.
NONFINITE_KEYS = ("loss/policy", "loss/value", "reward/mean", "grad_norm", "kl")


class Alerts(TrainerCallback):
    """Checks each unified row (as a `MetricsCallback` observer) and stops training on a `stop` alert."""

    def __init__(self, settings: AlertsSection, notify: Callable[[str, str], None] | None = None) -> None:
        self.settings = settings
        self.notify = notify
        self.collapsed_rows = 0
        self.stop_reason: str | None = None
        self.fired: list[dict[str, Any]] = []

    def __call__(self, row: dict[str, Any]) -> None:
        for name, message in self.check(row):
            action = getattr(self.settings, name).action
            row[f"alerts/{name}"] = 1.0
            self.fired.append({"step": row.get("step"), "alert": name, "action": action, "message": message})
            print(f"alert at step {row.get('step')}: {name}: {message} ({action})", file=sys.stderr)
            if self.notify is not None:
                self.notify(f"llm_rl alert: {name}", f"step {row.get('step')}: {message}")
            if action == "stop" and self.stop_reason is None:
                self.stop_reason = f"{name} at step {row.get('step')}: {message}"

    def check(self, row: dict[str, Any]) -> list[tuple[str, str]]:
        """(alert, message) for each alert this row fires."""
        fired = []
        for name, key in BOUND_METRICS.items():
            rule = getattr(self.settings, name)
            value = row.get(key)
            if (
                rule.action != "off"
                and rule.above is not None
                and isinstance(value, int | float)
                and value > rule.above
            ):
                fired.append((name, f"{key} {value:.4g} is above {rule.above:g}"))
        collapse = self.settings.reward_collapse
        spread = row.get("reward/std")
        if isinstance(spread, int | float):
            self.collapsed_rows = self.collapsed_rows + 1 if spread == 0 else 0
            if collapse.action != "off" and self.collapsed_rows == collapse.rows:
                fired.append(
                    ("reward_collapse", f"every sample got the same reward for {collapse.rows} rows")
                )
        broken = [key for key in NONFINITE_KEYS if key in row and row[key] is None]
        if broken and self.settings.nonfinite.action != "off":
            fired.append(("nonfinite", f"NaN or inf in {', '.join(broken)}"))
        return fired

    def on_log(self, args, state, control, **kwargs):
        # After MetricsCallback (earlier in the list) has turned this log into a row on the main process.
        if share_from_main_process(self.stop_reason is not None):
            control.should_training_stop = True
            control.should_save = True
        return control

    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None


def weights_are_finite(model: torch.nn.Module) -> bool:
    """Whether every parameter this process holds is finite, agreed over all processes."""
    parameters = [p for p in model.parameters() if p.numel()]
    finite = all(bool(torch.isfinite(p).all()) for p in parameters)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        device = parameters[0].device if parameters else "cpu"
        flag = torch.tensor([0.0 if finite else 1.0], device=device)
        torch.distributed.all_reduce(flag)
        finite = flag.item() == 0
    return finite


class NoNonFiniteSaves(TrainerCallback):
    """Cancels a checkpoint when the weights hold NaN or inf, and stops: no checkpoint ever holds them.

    Added after every other callback, so it sees the final `should_save` of a step and of a log (both
    trainers save right after these two events).
    """

    def __init__(self) -> None:
        self.broken = False

    def on_step_end(self, args, state, control, model=None, **kwargs):
        return self.check(state, control, model)

    def on_log(self, args, state, control, model=None, **kwargs):
        return self.check(state, control, model)

    def check(self, state, control, model: torch.nn.Module | None):
        if control.should_save and model is not None and not weights_are_finite(model):
            control.should_save = False
            control.should_training_stop = True
            self.broken = True
            print(
                f"step {state.global_step}: the weights hold NaN or inf; not saved, stopping", file=sys.stderr
            )
        return control

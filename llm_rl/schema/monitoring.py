"""The monitoring section: wandb, Prometheus, TensorBoard, progress lines, and the alerts that watch
the metric rows."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from llm_rl.schema.section import Section


class WandbSection(Section):
    # "auto": online when logged in, offline otherwise.
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    project: str = "llm_rl"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = Field(default_factory=list)


def yaml_off(value: Any) -> Any:
    """YAML 1.1 reads a bare `off` as false: `action: off` means the action "off"."""
    return "off" if value is False else value


AlertAction = Annotated[Literal["warn", "stop", "off"], BeforeValidator(yaml_off)]


class BoundAlert(Section):
    """Fires when a metric goes above `above`; an alert that is off needs no bound."""

    above: float | None = Field(None, gt=0.0)
    # warn: log it and go on; stop: save the last good state and end with status stopped_by_alert.
    action: AlertAction = "warn"

    @model_validator(mode="after")
    def _a_bound_when_on(self) -> BoundAlert:
        if self.above is None and self.action != "off":
            raise ValueError(f"give the bound `above` for action {self.action!r}, or set action: off")
        return self


class CollapseAlert(Section):
    """Fires when every sample got the same reward (`reward/std` 0) for `rows` rows in a row."""

    rows: int = Field(20, gt=0)
    action: AlertAction = "warn"


class NonFiniteAlert(Section):
    """Fires on NaN or inf in a loss, the reward or the gradient norm."""

    action: AlertAction = "stop"


class CountAlert(Section):
    """Fires when a count goes above `above` (0: on the first one)."""

    above: int = Field(0, ge=0)
    action: AlertAction = "warn"


class AlertsSection(Section):
    grad_norm: BoundAlert = Field(default_factory=lambda: BoundAlert(above=100.0))
    kl: BoundAlert = Field(default_factory=lambda: BoundAlert(above=10.0))
    value_loss: BoundAlert = Field(default_factory=lambda: BoundAlert(above=100.0))
    # GPU health through NVML (gpu/temperature_c, gpu/ecc_errors); no readings, no alert, on a host
    # without NVML. Datacenter GPUs throttle their clocks near 85-90 C.
    gpu_temperature: BoundAlert = Field(default_factory=lambda: BoundAlert(above=85.0))
    # Uncorrected memory errors since the driver loaded: results computed on that GPU may be wrong.
    ecc_errors: CountAlert = Field(default_factory=CountAlert)
    reward_collapse: CollapseAlert = Field(default_factory=CollapseAlert)
    nonfinite: NonFiniteAlert = Field(default_factory=NonFiniteAlert)


class PrometheusSection(Section):
    """The unified metrics at http://host:port/metrics while training (main process only)."""

    # None: no endpoint.
    port: int | None = Field(None, ge=1, le=65535)
    # Loopback by default; "0.0.0.0" lets a Prometheus server on another host scrape it.
    host: str = "127.0.0.1"


class MonitoringSection(Section):
    wandb: WandbSection = Field(default_factory=WandbSection)
    prometheus: PrometheusSection = Field(default_factory=PrometheusSection)
    alerts: AlertsSection = Field(default_factory=AlertsSection)
    tensorboard: bool = False
    # Print a progress bar and a line of metrics at every logging step.
    progress: bool = True

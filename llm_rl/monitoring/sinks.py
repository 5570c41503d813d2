"""wandb, TensorBoard and Prometheus set-up from the recipe's `monitoring` section.

wandb logs the unified metric names against `samples`, so that GRPO and PPO runs overlay on one chart.
Offline runs write under `<output_dir>/wandb`. The API key is read by wandb itself and never logged.
"""

from __future__ import annotations

import netrc
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm_rl.errors import RecipeError
from llm_rl.monitoring.metrics import JsonlSink, MetricSink, TensorBoardSink
from llm_rl.schema import Recipe, WandbSection

WANDB_ID_FILE = "wandb_run_id"


def wandb_logged_in() -> bool:
    """True when wandb has credentials: an API key in the environment or a netrc entry."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        hosts = netrc.netrc().hosts
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    return any("wandb" in host for host in hosts)


def wandb_mode(section: WandbSection) -> str:
    """The mode wandb runs in: `auto` is online when logged in and offline otherwise."""
    if section.mode != "auto":
        return section.mode
    return "online" if wandb_logged_in() else "offline"


class WandbSink:
    """Logs unified rows to a wandb run, with `samples` as the x-axis of every chart."""

    def __init__(self, recipe: Recipe, output_dir: Path, mode: str) -> None:
        import wandb

        section = recipe.monitoring.wandb
        self._run = wandb.init(
            project=section.project,
            entity=section.entity,
            group=section.group,
            tags=section.tags or None,
            name=recipe.run_name,
            config=recipe.to_dict(),
            mode=mode,
            dir=str(output_dir),
            id=wandb_run_id(output_dir),
            resume="allow",
            job_type=recipe.algorithm,
        )
        self._run.define_metric("samples")
        self._run.define_metric("*", step_metric="samples")

    def write(self, row: dict[str, Any]) -> None:
        self._run.log({k: v for k, v in row.items() if v is not None})

    def alert(self, title: str, text: str) -> None:
        """A wandb alert (online runs only; offline runs keep the metric)."""
        if self._run.settings.mode == "online":
            self._run.alert(title=title, text=text)

    def close(self) -> None:
        self._run.finish()


def wandb_run_id(output_dir: Path) -> str:
    """The run folder's wandb id, made once, so that a resumed run continues the same wandb run."""
    path = output_dir / WANDB_ID_FILE
    if path.exists():
        return path.read_text().strip()
    run_id = uuid.uuid4().hex[:12]
    path.write_text(run_id)
    return run_id


def wandb_notifier(sinks: list[MetricSink]) -> Callable[[str, str], None] | None:
    """The wandb sink's `alert`, when the run logs to wandb."""
    for sink in sinks:
        if isinstance(sink, WandbSink):
            return sink.alert
    return None


def make_sinks(recipe: Recipe, output_dir: Path) -> list[MetricSink]:
    """Every sink the recipe asks for; `metrics.jsonl` always."""
    sinks: list[MetricSink] = [JsonlSink(output_dir / "metrics.jsonl")]
    mode = wandb_mode(recipe.monitoring.wandb)
    if mode != "disabled":
        sinks.append(WandbSink(recipe, output_dir, mode))
    if recipe.monitoring.tensorboard:
        sinks.append(TensorBoardSink(output_dir / "tensorboard"))
    if recipe.monitoring.prometheus.port is not None:
        sinks.append(PrometheusSink(recipe))
    return sinks


def prometheus_name(key: str) -> str:
    """A metrics.jsonl key as a Prometheus metric name: `reward/mean` -> `llm_rl_reward_mean`."""
    return "llm_rl_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


class PrometheusSink:
    """Serves the latest unified row at `/metrics` through prometheus_client: one gauge per key, labelled
    with the run's name and algorithm (a staged run: its recipe's; the `stage` gauge tells stages apart),
    and `llm_rl_alerts_total{alert=...}` counting the alerts that fired."""

    def __init__(self, recipe: Recipe) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, start_http_server

        section = recipe.monitoring.prometheus
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.labels = {"run": recipe.run_name, "algorithm": recipe.algorithm}
        self.gauges: dict[str, Any] = {}
        self._gauge_class = Gauge
        self.alerts = Counter(
            "llm_rl_alerts",
            "Alerts fired (monitoring.alerts)",
            [*self.labels, "alert"],
            registry=self.registry,
        )
        try:
            self.server, _ = start_http_server(section.port, addr=section.host, registry=self.registry)
        except OSError as err:
            raise RecipeError(
                f"monitoring.prometheus.port: cannot serve on {section.host}:{section.port}: {err.strerror}"
            ) from None

    def write(self, row: dict[str, Any]) -> None:
        for key, value in row.items():
            if key.startswith("alerts/"):
                self.alerts.labels(alert=key.removeprefix("alerts/"), **self.labels).inc()
            elif isinstance(value, int | float) and not isinstance(value, bool):
                self.gauge(key).labels(**self.labels).set(value)

    def gauge(self, key: str) -> Any:
        """The gauge of a metric key, made on first sight (reward functions and schedules add keys)."""
        if key not in self.gauges:
            self.gauges[key] = self._gauge_class(
                prometheus_name(key), f"{key} (metrics.jsonl)", list(self.labels), registry=self.registry
            )
        return self.gauges[key]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

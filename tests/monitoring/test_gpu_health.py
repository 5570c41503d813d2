"""GPU health in the metric rows: absent (not zero) where NVML is not, summed up over the GPUs where it
is, and the two GPU alerts. This host has no NVIDIA driver; the NVML readings themselves are checked by
the `gpu` test on a GPU host."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.monitoring.alerts import Alerts
from llm_rl.monitoring.gpu_health import KEYS, GpuHealth, summarise
from llm_rl.run.training import train
from llm_rl.schema import AlertsSection
from tests.conftest import in_process_recipe, rows


def test_readings_are_summed_up_over_the_gpus() -> None:
    per_gpu = [
        {"utilization": 90.0, "memory_used_mb": 70_000.0, "temperature_c": 61.0, "ecc_errors": 0.0},
        {"utilization": 30.0, "memory_used_mb": 81_000.0, "temperature_c": 78.0, "ecc_errors": 2.0},
        {"utilization": 60.0, "memory_used_mb": 10.0, "temperature_c": 40.0},  # a GPU without ECC
    ]
    assert summarise(per_gpu) == {
        "gpu/utilization": 60.0,
        "gpu/memory_used_mb": 81_000.0,
        "gpu/temperature_c": 78.0,
        "gpu/ecc_errors": 2.0,
    }
    assert summarise([{"utilization": 5.0}]) == {"gpu/utilization": 5.0}


@pytest.mark.skipif(GpuHealth().handles != [], reason="this host has NVML and a GPU")
def test_without_nvml_the_keys_are_absent_and_training_goes_on(tmp_path: Path) -> None:
    assert GpuHealth().sample() == {}
    run = tmp_path / "run"
    assert train(in_process_recipe("grpo", run, "training.max_steps=2"))["status"] == "completed"
    assert all(not key.startswith("gpu/") for row in rows(run) for key in row)


@pytest.mark.gpu
def test_on_a_gpu_nvml_reads_utilisation_memory_and_temperature() -> None:
    import torch

    torch.ones(1024, 1024, device="cuda")  # some memory in use
    readings = GpuHealth().sample()
    assert {"gpu/utilization", "gpu/memory_used_mb", "gpu/temperature_c"} <= readings.keys() <= set(KEYS)
    assert readings["gpu/memory_used_mb"] > 0 and 0 < readings["gpu/temperature_c"] < 120


def test_a_hot_gpu_and_an_ecc_error_fire_their_alerts() -> None:
    alerts = Alerts(AlertsSection())
    cool = {"step": 1, "gpu/temperature_c": 70.0, "gpu/ecc_errors": 0.0}
    hot = {"step": 2, "gpu/temperature_c": 91.0, "gpu/ecc_errors": 1.0}
    alerts(cool)
    alerts(hot)
    assert "alerts/gpu_temperature" not in cool and "alerts/ecc_errors" not in cool
    assert hot["alerts/gpu_temperature"] == 1.0 and hot["alerts/ecc_errors"] == 1.0
    assert [fired["alert"] for fired in alerts.fired] == ["gpu_temperature", "ecc_errors"]


def test_no_readings_fire_no_gpu_alert() -> None:
    alerts = Alerts(AlertsSection(gpu_temperature={"above": 1.0}, ecc_errors={"above": 0, "action": "stop"}))
    row = {"step": 1, "reward/mean": 0.5}
    alerts(row)
    assert alerts.fired == [] and alerts.stop_reason is None

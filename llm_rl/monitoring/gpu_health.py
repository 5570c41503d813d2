"""GPU health beside the training metrics, as operators watch it: utilisation, memory, temperature and
uncorrected memory (ECC) errors of the GPUs this process sees, read through NVML once per logging row.

The readings are summed up over the node's visible GPUs so that one key answers one question: the mean
utilisation, the fullest GPU's memory, the hottest GPU's temperature and the ECC errors of all of them.
On a host without NVML (no NVIDIA driver, or `nvidia-ml-py` not installed) the keys are absent, never
zero: a zero would read as an idle, cool GPU.
"""

from __future__ import annotations

import os
from typing import Any

KEYS = ("gpu/utilization", "gpu/memory_used_mb", "gpu/temperature_c", "gpu/ecc_errors")


class GpuHealth:
    """NVML readings for the metric rows; `sample()` is empty where NVML is not."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no package, no driver library, no GPU: no readings
            return
        self.nvml = pynvml
        self.handles = visible_handles(pynvml)

    def sample(self) -> dict[str, float]:
        """The node's GPU health now, by the keys in `KEYS` (only those NVML can answer)."""
        if not self.handles:
            return {}
        per_gpu = [self.read(handle) for handle in self.handles]
        return summarise(per_gpu)

    def read(self, handle: Any) -> dict[str, float]:
        """One GPU's readings; a reading the GPU does not support (ECC on consumer cards) is left out."""
        nvml = self.nvml
        readers = {
            "utilization": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            "memory_used_mb": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "ecc_errors": lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            ),
        }
        readings = {}
        for name, read in readers.items():
            try:
                readings[name] = float(read())
            except nvml.NVMLError:
                continue
        return readings

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.nvmlShutdown()
            self.nvml, self.handles = None, []


def visible_handles(nvml: Any) -> list[Any]:
    """NVML handles of the GPUs in CUDA_VISIBLE_DEVICES (indices or UUIDs), or of all GPUs."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    handles = []
    for entry in filter(None, (part.strip() for part in visible.split(","))):
        if entry.isdigit():
            handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
        else:
            handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
    return handles


def summarise(per_gpu: list[dict[str, float]]) -> dict[str, float]:
    """One value per key over the GPUs: mean utilisation, most memory used, hottest, all ECC errors."""

    def values(name: str) -> list[float]:
        return [gpu[name] for gpu in per_gpu if name in gpu]

    combine = {
        "utilization": lambda v: sum(v) / len(v),
        "memory_used_mb": max,
        "temperature_c": max,
        "ecc_errors": sum,
    }
    return {f"gpu/{name}": how(values(name)) for name, how in combine.items() if values(name)}

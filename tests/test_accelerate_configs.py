"""Every shipped accelerate config loads through accelerate's own config class, with what its name says."""

from __future__ import annotations

from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType
from conftest import REPO

CONFIGS = sorted((REPO / "accelerate_configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_loads_through_accelerate(path: Path) -> None:
    config = load_config_from_file(str(path))
    assert config.num_processes >= 1
    if path.name.startswith("cpu_"):
        assert config.num_processes == 2 and config.mixed_precision == "no", (
            "CPU configs run 2 processes in fp32"
        )
    else:
        assert config.mixed_precision == "bf16", "GPU configs are bf16 for A100/H100"
    if "zero" in path.name:
        assert config.distributed_type == DistributedType.DEEPSPEED
        assert config.deepspeed_config["zero_stage"] == int(path.name.split("zero")[1][0])


def test_single_gpu_runs_one_process() -> None:
    config = load_config_from_file(str(REPO / "accelerate_configs" / "single_gpu.yaml"))
    assert (config.distributed_type, config.num_processes) == (DistributedType.NO, 1)

"""Every shipped accelerate config loads through accelerate's own config class, with what its name says."""

from __future__ import annotations

from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType

from tests.conftest import REPO

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


DEEPSPEED_CONFIGS = [path for path in CONFIGS if "zero" in path.name]


@pytest.mark.parametrize("path", DEEPSPEED_CONFIGS, ids=[p.name for p in DEEPSPEED_CONFIGS])
def test_deepspeed_section_is_a_config_deepspeed_accepts(path: Path) -> None:
    """accelerate's plugin builds the DeepSpeed config, Trainer fills its `auto` values, DeepSpeed parses it."""
    from accelerate.utils import DeepSpeedPlugin
    from deepspeed.runtime.config import DeepSpeedConfig
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    section = dict(load_config_from_file(str(path)).deepspeed_config)
    section.pop("deepspeed_multinode_launcher", None)
    plugin = DeepSpeedPlugin(**section)
    assert plugin.deepspeed_config["gradient_clipping"] == "auto", "the recipe's max_grad_norm must decide it"
    filled = HfTrainerDeepSpeedConfig(plugin.deepspeed_config)
    arguments = TrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        use_cpu=True,
        max_grad_norm=0.5,
    )
    filled.trainer_config_process(arguments)
    config = DeepSpeedConfig(filled.config)
    assert config.zero_optimization_stage == section["zero_stage"]
    assert (config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (4, 2)
    assert config.gradient_clipping == 0.5
    offload = config.zero_config.offload_optimizer
    assert (offload.device if offload else "none") == section["offload_optimizer_device"]

"""`generation.backend: vllm` on vLLM's CPU build: the engine holds the policy's weights after every update,
for every algorithm, with LoRA (merged weights) and under DeepSpeed ZeRO-3 (gathered a parameter at a
time), and a skipped weight sync is caught.

Marked `vllm`: `make test-vllm` runs them in .venv-vllm, where vLLM's CPU build is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ACCELERATE_LAUNCH, ALGORITHMS, ARITHMETIC, REPO, rows, run_entry, sets
from tests.generation.conftest import VLLM, group_size

pytestmark = pytest.mark.vllm


def sync_probes(algorithm: str, output: Path, *extra: str, skip_sync: bool = False) -> list[dict]:
    """Three updates of 32 samples at a learning rate that moves the greedy answers, probed before every
    generation (tests/vllm_sync_probe.py); `extra` overrides."""
    overrides = [
        f"run.output_dir={output}",
        "training.max_steps=3",
        "training.per_device_batch_size=32",
        "training.learning_rate=1e-3",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
        *VLLM,
        *group_size(algorithm),
        *extra,
    ]
    command = ["tests/vllm_sync_probe.py", str(ARITHMETIC / f"{algorithm}.yaml"), *sets(*overrides)]
    result = run_entry([*command, *(["--skip-sync"] if skip_sync else [])])
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output / "sync-probe.json").read_text())


def agreeing(probe: dict) -> int:
    """How many of the 100 probe prompts the engine completes exactly as transformers does."""
    return sum(engine == hf for engine, hf in zip(probe["engine"], probe["transformers"], strict=True))


def moved(before: dict, after: dict) -> int:
    """How many greedy completions of the policy an update changed."""
    return sum(a != b for a, b in zip(before["transformers"], after["transformers"], strict=True))


# --------------------------------------------------------------------------------------------------
# The engine holds the policy's weights
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_engine_samples_the_updated_policy_after_every_update(tmp_path: Path, algorithm: str) -> None:
    """fp32 greedy completions of the engine equal transformers' for the policy as the trainer holds it:
    before any update (the hf backend's answers), and after each of two updates that changed them."""
    probes = sync_probes(algorithm, tmp_path / "run")
    assert len(probes) == 3, "one probe per generation: before updates 1, 2 and 3"
    assert [agreeing(probe) for probe in probes] == [100, 100, 100]
    assert moved(probes[0], probes[1]) > 0 and moved(probes[1], probes[2]) > 0, "updates too small to tell"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_skipped_weight_sync_is_caught(tmp_path: Path, algorithm: str) -> None:
    """The same run with the engine's weight push turned into nothing: after an update the engine still
    answers as the starting policy, and the comparison above fails."""
    probes = sync_probes(algorithm, tmp_path / "run", skip_sync=True)
    assert agreeing(probes[0]) == 100
    assert agreeing(probes[1]) < 100 and agreeing(probes[2]) < 100
    assert probes[2]["engine"] == probes[0]["engine"], "a stale engine keeps the starting weights"


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_with_lora_the_engine_gets_the_merged_weights(tmp_path: Path, algorithm: str) -> None:
    """The adapter merged into the base for the push, and taken out again: the engine answers as the policy
    with its adapter on, after every update (a learning rate for adapters, which start at zero)."""
    probes = sync_probes(
        algorithm, tmp_path / "run", "model.lora.enabled=true", "training.learning_rate=1e-2"
    )
    assert [agreeing(probe) for probe in probes] == [100, 100, 100]
    assert moved(probes[0], probes[1]) > 0 and moved(probes[1], probes[2]) > 0, "updates too small to tell"


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_under_zero3_the_engines_sample_as_under_ddp(tmp_path: Path, algorithm: str) -> None:
    """Two processes, each with its engine: under ZeRO-3 each parameter is gathered for the push, and the
    runs sample, score and update exactly as under DDP, where every process holds the whole policy."""
    metrics = {}
    for config in ("cpu_ddp_2proc", "cpu_zero3_2proc"):
        run = tmp_path / config
        overrides = [f"run.output_dir={run}", "training.max_steps=3", "monitoring.wandb.mode=disabled",
                     "monitoring.progress=false", "training.per_device_batch_size=16", *VLLM,
                     *group_size(algorithm)]  # fmt: skip
        result = run_entry(
            ["--config_file", str(REPO / "accelerate_configs" / f"{config}.yaml"),
             f"recipes/{algorithm}.py", *sets(*overrides)],
            timeout=600, launcher=ACCELERATE_LAUNCH,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        metrics[config] = [
            value for row in rows(run) for value in (row["reward/mean"], row["completion_length/mean"])
        ]
    assert len(metrics["cpu_zero3_2proc"]) == 6
    assert metrics["cpu_zero3_2proc"] == pytest.approx(metrics["cpu_ddp_2proc"], rel=1e-6)

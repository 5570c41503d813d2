"""`generation.backend: vllm` on vLLM's CPU build, for every algorithm: the engine holds the policy's weights
after every update (and a skipped sync is caught), the embedded default trains into a complete run folder,
a killed run resumes, a staged run hands over, and what this host cannot do is refused at validate.

Marked `vllm`: `make test-vllm` runs them in .venv-vllm, where vLLM's CPU build is installed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from llm_rl.training.checkpoints import list_checkpoints, read_state
from tests.conftest import ALGORITHMS, ARITHMETIC, LLM_RL, REPO, entry, rows, run_entry, run_ok, sets

pytestmark = pytest.mark.vllm

# One engine a process on a CPU: a small KV cache, so that test workers side by side fit in memory.
VLLM = ("generation.backend=vllm", "generation.vllm.kv_cache_gb=1")


def group_size(algorithm: str) -> tuple[str, ...]:
    """GRPO and RLOO: groups of 4 completions."""
    return () if algorithm == "ppo" else (f"{algorithm}.num_generations=4",)


def sync_probes(algorithm: str, output: Path, skip_sync: bool = False) -> list[dict]:
    """Three updates of 32 samples at a learning rate that moves the greedy answers, probed before every
    generation (tests/vllm_sync_probe.py)."""
    overrides = [
        f"run.output_dir={output}",
        "training.max_steps=3",
        "training.per_device_batch_size=32",
        "training.learning_rate=1e-3",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
        *VLLM,
        *group_size(algorithm),
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


# --------------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_trains_the_embedded_default_into_a_complete_run_folder(
    tmp_path: Path, algorithm: str
) -> None:
    run = tmp_path / "run"
    summary = run_ok(algorithm, run, "training.max_steps=3", *VLLM)
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert yaml.safe_load((run / "recipe.yaml").read_text())["generation"]["backend"] == "vllm"
    assert [row["step"] for row in rows(run)] == [1, 2, 3]
    assert all(row["completion_length/mean"] > 0 for row in rows(run))
    assert (run / "final" / "config.json").is_file() and (run / "final" / "model.safetensors").is_file()


def test_llm_rl_train_runs_the_arithmetic_recipe_on_vllm(tmp_path: Path) -> None:
    """The command the README gives, through the console script."""
    run = tmp_path / "run"
    overrides = [f"run.output_dir={run}", "training.max_steps=2", "training.per_device_batch_size=16",
                 "monitoring.wandb.mode=disabled", *VLLM]  # fmt: skip
    result = subprocess.run(
        [LLM_RL, "train", str(ARITHMETIC / "ppo.yaml"), *sets(*overrides)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run / "run_summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_killed_vllm_run_resumes_and_finishes_its_budget(tmp_path: Path, algorithm: str) -> None:
    """Killed after a checkpoint, started again: the engine takes the resumed weights before it generates."""
    run = tmp_path / "run"
    command = [sys.executable, *entry(algorithm, run, "training.max_steps=8", "checkpointing.every=2",
                                      "checkpointing.unit=steps", *VLLM)]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list_checkpoints(run) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert read_state(list_checkpoints(run)[0])["step"] < 8

    result = run_entry(command[1:], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from"] is not None
    assert [row["step"] for row in rows(run)] == list(range(1, 9)), "one row per step, none twice"


def test_a_staged_run_hands_over_from_grpo_to_ppo_on_vllm(tmp_path: Path) -> None:
    """GRPO then PPO in one process, each stage on an engine of its own started from the stage's policy."""
    recipe = tmp_path / "staged.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "extends": str(ARITHMETIC / "grpo.yaml"),
                "run": {"output_dir": str(tmp_path / "run")},
                "training": {"per_device_batch_size": 16},
                "monitoring": {"wandb": {"mode": "disabled"}, "progress": False},
                "generation": {"backend": "vllm", "vllm": {"kv_cache_gb": 1}},
                "stages": [
                    {"name": "grpo", "max_steps": 2, "overrides": {"grpo": {"num_generations": 4}}},
                    {
                        "name": "ppo",
                        "max_steps": 2,
                        "overrides": {"algorithm": "ppo", "ppo": {"kl_coef": 0.0}},
                    },
                ],
            }
        )
    )
    result = subprocess.run(
        [LLM_RL, "train", str(recipe)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["status"] == "completed"
    assert [row["step"] for row in rows(tmp_path / "run")] == [1, 2, 3, 4]


# --------------------------------------------------------------------------------------------------
# Refusals at validate
# --------------------------------------------------------------------------------------------------


def validate(tmp_path: Path, generation: dict, **env: str) -> subprocess.CompletedProcess:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {"extends": str(ARITHMETIC / "grpo.yaml"), "generation": {"backend": "vllm", **generation}}
        )
    )
    return subprocess.run(
        [LLM_RL, "validate", str(recipe)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("generation", "message"),
    [
        (
            {"vllm": {"sleep_mode": True}},
            "generation.vllm.sleep_mode: vLLM has no sleep mode on this platform",
        ),
        ({"vllm": {"mode": "server"}}, "generation.vllm.mode: 'server' needs CUDA GPUs"),
        (
            {"vllm": {"tensor_parallel_size": 2}},
            "generation.vllm.tensor_parallel_size (2) must divide the run's 1 process(es)",
        ),
    ],
)
def test_what_this_host_cannot_do_is_refused_at_validate(
    tmp_path: Path, generation: dict, message: str
) -> None:
    result = validate(tmp_path, generation)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_vllm_cannot_load_is_refused_before_it_loads(tmp_path: Path, unsupported_model: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "extends": str(ARITHMETIC / "ppo.yaml"),
                "model": {"policy": str(unsupported_model)},
                "generation": {"backend": "vllm"},
            }
        )
    )
    result = subprocess.run(
        [LLM_RL, "validate", str(recipe)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr
    assert "model.policy: vLLM cannot load this model" in result.stderr
    assert "Traceback" not in result.stderr

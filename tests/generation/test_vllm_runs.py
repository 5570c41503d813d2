"""`generation.backend: vllm` on vLLM's CPU build, for every algorithm: the embedded default trains into a
complete run folder, a killed run resumes, a staged run hands over, held-out evaluation runs on the
trainer's engine, and what this host cannot do is refused at validate.

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
from tests.generation.conftest import VLLM

pytestmark = pytest.mark.vllm

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


@pytest.mark.parametrize("estimator", ["group", "reinforce_pp"])
def test_ppo_critic_free_estimators_generate_on_vllm(tmp_path: Path, estimator: str) -> None:
    """4 completions a prompt from the colocated engine, in consecutive rows, and no critic anywhere."""
    run = tmp_path / "run"
    summary = run_ok(
        "ppo", run, "training.max_steps=2", f"ppo.advantage_estimator={estimator}", "ppo.num_generations=4",
        *VLLM,
    )  # fmt: skip
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert all("reward/group_std" in row and "loss/value" not in row for row in rows(run))
    assert not (run / "final" / "value_model").exists()


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


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_held_out_evaluation_runs_on_the_trainers_engine(tmp_path: Path, algorithm: str) -> None:
    """Greedy held-out completions from the engine (fp32) score as transformers' do: the starting policy's
    held-out reward is the same on both backends, and every evaluation row is there."""
    evaluation = ("training.max_steps=2", "evaluation.every=2", "evaluation.at_start=true")
    run_ok(algorithm, tmp_path / "hf", *evaluation)
    run_ok(algorithm, tmp_path / "vllm", *evaluation, *VLLM)
    held_out = {
        backend: [row for row in rows(tmp_path / backend) if "eval/reward/mean" in row]
        for backend in ("hf", "vllm")
    }
    assert [row["step"] for row in held_out["vllm"]] == [0, 2]
    assert held_out["vllm"][0]["eval/num_prompts"] == 200
    assert held_out["vllm"][0]["eval/reward/mean"] == held_out["hf"][0]["eval/reward/mean"]


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

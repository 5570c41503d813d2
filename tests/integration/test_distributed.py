"""GRPO in two real processes on CPU under DDP, ZeRO-2 and ZeRO-3, and early stopping decided on rank 0
and obeyed by every rank, for both algorithms. (PPO's own 2-process runs: algorithms/test_ppo.py, integration/test_deepspeed.py.)

Each launch takes 10-25 s on 2 cores: two or three updates of the embedded recipe.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from llm_rl.models.load import resolve_model_path
from llm_rl.training.checkpoints import list_checkpoints
from tests.conftest import ACCELERATE_LAUNCH, REPO, run_entry

CONFIGS = {
    name: str(REPO / "accelerate_configs" / f"cpu_{name}_2proc.yaml") for name in ("ddp", "zero2", "zero3")
}
# 8 completions per process, groups of 4: 16 completions an update over the two processes.
GRPO_SMALL = ["training.per_device_batch_size=8", "grpo.num_generations=4"]
PPO_SMALL = ["training.per_device_batch_size=8"]


def launch(config: str, algorithm: str, output: Path, *overrides: str) -> dict:
    """`accelerate launch --config_file CONFIG recipes/<algorithm>.py` on the embedded recipe; its summary."""
    small = GRPO_SMALL if algorithm == "grpo" else PPO_SMALL
    settings = [f"run.output_dir={output}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"]
    args = ["--config_file", config, f"recipes/{algorithm}.py"]
    for override in (*settings, *small, *overrides):
        args += ["--set", override]
    result = run_entry(args, launcher=ACCELERATE_LAUNCH, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output / "run_summary.json").read_text())


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("config", list(CONFIGS))
def test_grpo_in_two_processes(tmp_path: Path, config: str) -> None:
    run = tmp_path / "run"
    summary = launch(
        CONFIGS[config],
        "grpo",
        run,
        "training.max_steps=2",
        "checkpointing.every=1",
        "checkpointing.unit=steps",
    )
    assert (summary["status"], summary["steps"], summary["samples"]) == ("completed", 2, 32)
    logged = rows(run)
    assert [row["samples"] for row in logged] == [16, 32], "one row per update, written once"
    # A batch whose groups all share one reward has no advantage and a zero gradient: not every row moves.
    assert all(row["grad_norm"] >= 0 for row in logged) and any(row["grad_norm"] > 0 for row in logged)
    assert [path.name for path in list_checkpoints(run)] == ["checkpoint-16", "checkpoint-32"]
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny-arithmetic")).state_dict()
    final = AutoModelForCausalLM.from_pretrained(run / "final").state_dict()
    for key, tensor in base.items():
        assert final[key].shape == tensor.shape, f"{key}: not gathered whole"
    assert any(not final[key].equal(tensor) for key, tensor in base.items()), "the policy trained"


def test_grpo_resumes_under_zero2(tmp_path: Path) -> None:
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "training.lr_scheduler=constant"]
    launch(CONFIGS["zero2"], "grpo", tmp_path / "straight", "training.max_steps=4", *common)
    launch(CONFIGS["zero2"], "grpo", tmp_path / "resumed", "training.max_steps=2", *common)
    checkpoint = tmp_path / "resumed" / "checkpoint-32"
    assert list(checkpoint.glob("global_step*/*optim_states.pt")), "DeepSpeed's optimizer shards"
    assert (checkpoint / "rng_state_1.pth").exists(), "rank 1's RNG state"
    summary = launch(CONFIGS["zero2"], "grpo", tmp_path / "resumed", "training.max_steps=4", *common)
    assert Path(summary["resumed_from"]).name == "checkpoint-32"
    straight, resumed = rows(tmp_path / "straight"), rows(tmp_path / "resumed")
    assert [row["step"] for row in resumed] == [1, 2, 3, 4]
    keys = ("samples", "reward/mean", "loss/policy", "grad_norm")
    for a, b in zip(straight, resumed, strict=True):
        assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_early_stopping_is_obeyed_by_every_rank(tmp_path: Path, algorithm: str) -> None:
    """Rank 0 decides; if rank 1 went on alone, its next collective would hang and the launch time out."""
    run = tmp_path / "run"
    summary = launch(
        CONFIGS["ddp"], algorithm, run,
        "training.max_steps=30", "training.learning_rate=0", "early_stopping.enabled=true",
        "early_stopping.patience=2", "early_stopping.rows_per_round=1", "early_stopping.min_delta=1.0",
    )  # fmt: skip
    assert summary["status"] == "early_stopped"
    # Round 1 sets the best; no round can beat it by 1.0, so rounds 2 and 3 end the patience.
    assert summary["steps"] == 3 and len(rows(run)) == 3
    assert (run / "final").is_dir() and list_checkpoints(run)

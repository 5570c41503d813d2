"""Runs you can leave alone, for both algorithms: early stopping, atomic checkpoints, resume after a
crash (a real SIGKILL), rollback, and alerts that fire on crafted runs."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, run_entry
from safetensors.torch import load_file

from llm_rl.recipe.load import load_recipe
from llm_rl.run.training import train
from llm_rl.training.checkpoints import STAGING_DIR, STATE_FILE, list_checkpoints, read_state

LLM_RL = str(Path(sys.executable).parent / "llm-rl")
ALGORITHMS = ["grpo", "ppo"]

# Small enough for a second or two per update on 2 CPU cores, for either algorithm.
SMALL = {
    "grpo": ["training.per_device_batch_size=16", "grpo.num_generations=4"],
    "ppo": ["training.per_device_batch_size=16"],
}


def sets(*overrides: str) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def entry(algorithm: str, output: Path, *overrides: str) -> list[str]:
    """The command line of a small run of the embedded recipe through `recipes/<algorithm>.py`."""
    common = [f"run.output_dir={output}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"]
    return [f"recipes/{algorithm}.py", *sets(*common, *SMALL[algorithm], *overrides)]


def run_ok(algorithm: str, output: Path, *overrides: str) -> dict:
    result = run_entry(entry(algorithm, output, *overrides))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output / "run_summary.json").read_text())


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def in_process_recipe(algorithm: str, output: Path, *overrides: str):
    common = [f"run.output_dir={output}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"]
    return load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml", [*common, *SMALL[algorithm], *overrides]
    )


# --------------------------------------------------------------------------------------------------
# Early stopping
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_run_that_cannot_improve_stops_early(tmp_path: Path, algorithm: str) -> None:
    """Learning rate 0: the reward cannot improve by 0.5, so after 1 + patience rounds the run stops."""
    summary = run_ok(
        algorithm, tmp_path / "run",
        "training.max_steps=20", "training.learning_rate=0.0", "early_stopping.enabled=true",
        "early_stopping.patience=2", "early_stopping.rows_per_round=1", "early_stopping.min_delta=0.5",
    )  # fmt: skip
    assert summary["status"] == "early_stopped"
    assert summary["steps"] == 3, "one round sets the best, two more without improvement stop it"
    budget = 20 * rows(tmp_path / "run")[0]["samples"]
    assert summary["samples"] < budget
    (checkpoint,) = list_checkpoints(tmp_path / "run")
    assert read_state(checkpoint)["step"] == 3
    assert read_state(checkpoint)["early_stopping"]["rounds_without_improvement"] == 2
    assert (tmp_path / "run" / "final" / "config.json").exists()


# --------------------------------------------------------------------------------------------------
# Checkpoints: cadence, rotation, atomicity
# --------------------------------------------------------------------------------------------------


def test_cadence_in_samples_names_folders_by_samples_and_keeps_the_best(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("ppo", run, "training.max_steps=6", "checkpointing.every=32", "checkpointing.keep_last=1",
           "early_stopping.rows_per_round=2")  # fmt: skip
    states = {path.name: read_state(path) for path in list_checkpoints(run)}
    newest = "checkpoint-96"
    assert newest in states, states
    # Saved every 32 samples (2 updates of 16): 32, 64, 96; keep_last 1 keeps the newest and the best.
    scores = {}
    for row_index in (2, 4, 6):
        window = [row["reward/mean"] for row in rows(run)[row_index - 2 : row_index]]
        scores[f"checkpoint-{16 * row_index}"] = sum(window) / 2
    best = max(scores, key=scores.get)
    assert set(states) == {newest, best}
    for name, state in states.items():
        assert state["score"] == pytest.approx(scores[name])
        assert state["samples"] == int(name.split("-")[1])
    assert not (run / STAGING_DIR).exists()


def test_cadence_in_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("grpo", run, "training.max_steps=3", "checkpointing.every=1", "checkpointing.unit=steps",
           "checkpointing.keep_last=5")  # fmt: skip
    per_step = rows(run)[0]["samples"]
    assert [path.name for path in list_checkpoints(run)] == [f"checkpoint-{per_step * k}" for k in (1, 2, 3)]


def test_a_half_written_checkpoint_is_ignored_and_cleared(tmp_path: Path) -> None:
    run = tmp_path / "run"
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "training.lr_scheduler=constant"]
    run_ok("ppo", run, "training.max_steps=2", *common)
    # What a crash while writing the next checkpoint leaves: a staged folder, and a folder without state.
    staged = run / STAGING_DIR / "checkpoint-4"
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"truncated")
    (run / "checkpoint-48").mkdir()
    (run / "checkpoint-48" / "trainer_state.json").write_text("{}")
    summary = run_ok("ppo", run, "training.max_steps=4", *common)
    assert Path(summary["resumed_from"]).name == "checkpoint-32"
    assert summary["status"] == "completed"
    assert not (run / STAGING_DIR).exists()
    assert [row["step"] for row in rows(run)] == [1, 2, 3, 4]


# --------------------------------------------------------------------------------------------------
# Resume after a crash, and exactness
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_killed_run_started_again_finishes_its_budget(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    command = [sys.executable, *entry(algorithm, run, "training.max_steps=12", "checkpointing.every=2",
                                      "checkpointing.unit=steps")]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list_checkpoints(run) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (run / "run_summary.json").exists()
    killed_at = read_state(list_checkpoints(run)[0])["step"]
    assert killed_at < 12

    result = run_entry(command[1:])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["resumed_from"] is not None
    per_step = rows(run)[0]["samples"]
    assert summary["steps"] == 12 and summary["samples"] == 12 * per_step
    assert [row["step"] for row in rows(run)] == list(range(1, 13)), "one row per step, none twice"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resumed_run_ends_with_the_same_weights_as_a_straight_one(tmp_path: Path, algorithm: str) -> None:
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "training.lr_scheduler=constant"]
    run_ok(algorithm, tmp_path / "straight", "training.max_steps=4", *common)
    run_ok(algorithm, tmp_path / "resumed", "training.max_steps=2", *common)
    run_ok(algorithm, tmp_path / "resumed", "training.max_steps=4", *common)
    straight = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "final" / "model.safetensors")
    assert straight.keys() == resumed.keys()
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], rtol=0, atol=1e-6, msg=key)


# --------------------------------------------------------------------------------------------------
# Rollback
# --------------------------------------------------------------------------------------------------


def test_rollback_moves_later_checkpoints_aside_and_the_next_run_resumes_there(tmp_path: Path) -> None:
    run = tmp_path / "run"
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "checkpointing.keep_last=5"]
    run_ok("ppo", run, "training.max_steps=4", *common)
    result = run_entry(["rollback", str(run), "--to", "checkpoint-32"], launcher=[LLM_RL])
    assert result.returncode == 0, result.stderr
    assert [path.name for path in list_checkpoints(run)] == ["checkpoint-32"]
    (aside,) = (run / "rolled_back").iterdir()
    assert sorted(path.name for path in aside.iterdir()) == [
        "checkpoint-64", "final", "metrics.jsonl", "run_summary.json"
    ]  # fmt: skip
    assert [row["step"] for row in rows(run)] == [1, 2]
    summary = run_ok("ppo", run, "training.max_steps=4", *common)
    assert Path(summary["resumed_from"]).name == "checkpoint-32"
    assert [row["step"] for row in rows(run)] == [1, 2, 3, 4]

    result = run_entry(["rollback", str(run), "--to", "checkpoint-7"], launcher=[LLM_RL])
    assert result.returncode == 2 and "not a complete checkpoint" in result.stderr


def test_rollback_to_the_best(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("ppo", run, "training.max_steps=6", "checkpointing.every=2", "checkpointing.unit=steps",
           "checkpointing.keep_last=5", "early_stopping.rows_per_round=2")  # fmt: skip
    scores = {path.name: read_state(path)["score"] for path in list_checkpoints(run)}
    result = run_entry(["rollback", str(run), "--best"], launcher=[LLM_RL])
    assert result.returncode == 0, result.stderr
    assert list_checkpoints(run)[-1].name == max(scores, key=scores.get)


# --------------------------------------------------------------------------------------------------
# Alerts
# --------------------------------------------------------------------------------------------------

CALLS = {"count": 0}


def overflows_from_the_third_call(prompts, completions, **kwargs):
    """A finite reward that, weighted, overflows float32 from its third call on."""
    CALLS["count"] += 1
    return [3e38 if CALLS["count"] >= 3 else 0.5 for _ in completions]


def constant_reward(prompts, completions, **kwargs):
    return [1.0 for _ in completions]


def all_finite(folder: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(folder / "model.safetensors").values())


def test_nan_stops_the_run_and_no_checkpoint_holds_it(tmp_path: Path) -> None:
    # The recipe imports this module by its dotted path, as a module of its own.
    importlib.import_module("tests.test_safety").CALLS["count"] = 0
    run = tmp_path / "run"
    recipe = in_process_recipe(
        "ppo", run, "training.max_steps=8", "checkpointing.every=1", "checkpointing.unit=steps",
        "checkpointing.keep_last=10", "ppo.num_ppo_epochs=1",
        "rewards=[{name: 'tests.test_safety:overflows_from_the_third_call', weight: 10.0}]",
    )  # fmt: skip
    summary = train(recipe)
    assert summary["status"] == "stopped_by_alert"
    assert summary["steps"] < 8
    fired = [row for row in rows(run) if row.get("alerts/nonfinite")]
    assert fired and fired[0]["step"] == 3 and fired[0]["reward/mean"] is None
    checkpoints = list_checkpoints(run)
    assert checkpoints and all(all_finite(path) for path in checkpoints)
    assert all(read_state(path)["step"] < fired[0]["step"] or all_finite(path) for path in checkpoints)
    assert not (run / "final").exists() or all_finite(run / "final")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_stop_alert_saves_the_last_good_state(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    summary = run_ok(algorithm, run, "training.max_steps=6", "monitoring.alerts.grad_norm.above=1e-9",
                     "monitoring.alerts.grad_norm.action=stop")  # fmt: skip
    # The first update with a gradient (a GRPO step whose groups all tie has none) stops the run.
    first = next(row for row in rows(run) if row["grad_norm"] > 1e-9)
    assert summary["status"] == "stopped_by_alert" and summary["steps"] == first["step"]
    assert first["alerts/grad_norm"] == 1.0
    (checkpoint,) = list_checkpoints(run)
    assert read_state(checkpoint)["step"] == first["step"] and (checkpoint / STATE_FILE).exists()


def test_warn_alerts_are_logged_and_the_run_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    recipe = in_process_recipe(
        "ppo", run, "training.max_steps=4", "monitoring.alerts.kl.above=1e-12",
        "monitoring.alerts.value_loss.above=1e-9", "monitoring.alerts.reward_collapse.rows=2",
        "rewards=[{name: 'tests.test_safety:constant_reward'}]",
    )  # fmt: skip
    assert train(recipe)["status"] == "completed"
    logged = rows(run)
    assert len(logged) == 4
    assert all(row.get("alerts/value_loss") == 1.0 for row in logged)
    assert [row["step"] for row in logged if row.get("alerts/reward_collapse")] == [2]
    assert "alert at step 2: reward_collapse" in capsys.readouterr().err
    kl_rows = [row for row in logged if row["kl"] > 1e-12]
    assert kl_rows, "the policy moved away from the reference"
    assert all(row.get("alerts/kl") == 1.0 for row in kl_rows)


# --------------------------------------------------------------------------------------------------
# Held-out reward (evaluation.every) and early stopping on it
# --------------------------------------------------------------------------------------------------


def test_held_out_reward_matches_scoring_greedy_completions_directly(tmp_path: Path) -> None:
    from accelerate import Accelerator

    from llm_rl.run.training import build_components
    from llm_rl.training.evaluation import held_out_reward

    recipe = in_process_recipe("ppo", tmp_path / "run", "evaluation.every=1", "data.arithmetic.num_eval=9",
                               "evaluation.batch_size=4")  # fmt: skip
    components = build_components(recipe)
    evaluate = held_out_reward(components)
    metrics = evaluate(components.policy, Accelerator())
    assert metrics["eval/num_prompts"] == 9
    assert metrics == evaluate(components.policy, Accelerator()), "greedy: the same numbers twice"

    tokenizer, rows = components.tokenizer, components.data.eval
    completions = []
    for prompt in rows["prompt"]:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]  # with BOS, as the policy is prompted
        out = components.policy.generate(ids, max_new_tokens=recipe.generation.max_new_tokens, do_sample=False,
                                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        completions.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    columns = {key: list(rows[key]) for key in rows.column_names if key != "prompt"}
    direct = [
        sum(w * v for w, v in zip(components.rewards.weights, sample, strict=True))
        for sample in zip(
            *(
                f(prompts=list(rows["prompt"]), completions=completions, **columns)
                for f in components.rewards.functions
            ),
            strict=True,
        )  # fmt: skip
    ]
    assert metrics["eval/reward/mean"] == pytest.approx(sum(direct) / len(direct))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_early_stopping_on_the_held_out_reward(tmp_path: Path, algorithm: str) -> None:
    """Learning rate 0 and greedy evaluation: the held-out reward repeats exactly, so it never improves."""
    summary = run_ok(
        algorithm, tmp_path / "run",
        "training.max_steps=20", "training.learning_rate=0.0", "evaluation.every=1", "data.arithmetic.num_eval=16",
        "early_stopping.enabled=true", "early_stopping.metric=eval/reward/mean", "early_stopping.patience=2",
        "early_stopping.rows_per_round=1",
    )  # fmt: skip
    assert summary["status"] == "early_stopped" and summary["steps"] == 3
    logged = rows(tmp_path / "run")
    assert len({row["eval/reward/mean"] for row in logged}) == 1
    assert all(row["eval/num_prompts"] == 16 for row in logged)


def test_held_out_reward_in_two_processes_covers_every_prompt_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = str(REPO / "accelerate_configs" / "cpu_ddp_2proc.yaml")
    launcher = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", config]
    result = run_entry(entry("ppo", run, "training.max_steps=2", "evaluation.every=2", "data.arithmetic.num_eval=7",
                             "evaluation.batch_size=2"), launcher=launcher)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    logged = rows(run)
    assert [row["step"] for row in logged] == [1, 2]
    assert logged[1]["eval/num_prompts"] == 7 and "eval/reward/mean" not in logged[0]


BAD_EVALUATION = {
    "eval metric without evaluation": (
        ["early_stopping.metric=eval/reward/mean"],
        "evaluation.every is not set",
    ),
    "evaluation between logged rows": (["training.logging_steps=2", "evaluation.every=3"], "multiple of"),
    "no eval prompts": (["evaluation.every=2", "data.arithmetic.num_eval=0"], "no eval prompts"),
}


@pytest.mark.parametrize("case", list(BAD_EVALUATION))
def test_bad_evaluation_settings_exit_2(tmp_path: Path, case: str) -> None:
    overrides, expected = BAD_EVALUATION[case]
    result = run_entry(entry("grpo", tmp_path / "run", *overrides))
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()

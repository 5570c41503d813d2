"""Reward models trained with TRL's RewardTrainer (reward_models/train.py), then used in both algorithms."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from llm_rl.algorithms.base import build_components
from llm_rl.recipe.load import load_recipe
from llm_rl.reward_model.preferences import PreferenceDataSection, load_preferences
from llm_rl.rewards import get_reward
from llm_rl.rewards.reward_model import reward_model_reward
from llm_rl.run.training import train
from llm_rl.run_folder import read_rows
from tests.conftest import REPO, run_entry

ACCELERATE = [str(Path(sys.executable).parent / "accelerate"), "launch", "--num_processes", "1", "--cpu"]


def sets(*overrides: str) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


@pytest.fixture(scope="module")
def embedded_reward_model(tmp_path_factory) -> Path:
    """The embedded default, trained once through `accelerate launch reward_models/train.py`."""
    output = tmp_path_factory.mktemp("reward") / "run"
    result = run_entry(
        ["reward_models/train.py", *sets(f"run.output_dir={output}")], launcher=ACCELERATE, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out pairwise accuracy" in result.stdout
    return output


def test_the_embedded_reward_model_trains_offline_above_0_8(embedded_reward_model: Path) -> None:
    summary = json.loads((embedded_reward_model / "reward_summary.json").read_text())
    assert summary["held_out_pairwise_accuracy"] > 0.8
    assert summary["held_out_pairs"] == 400 and summary["train_pairs"] == 1400
    assert (embedded_reward_model / "final" / "config.json").exists()
    assert (embedded_reward_model / "config.yaml").exists()


def test_held_out_accuracy_is_what_the_reward_function_gives(embedded_reward_model: Path) -> None:
    """Recomputed here from the saved folder through `get_reward`, on the same held-out pairs."""
    held_out = load_preferences(PreferenceDataSection(), seed=0)[1]
    score = get_reward("reward_model", path=str(embedded_reward_model / "final"))
    chosen = score(prompts=held_out["prompt"], completions=held_out["chosen"])
    rejected = score(prompts=held_out["prompt"], completions=held_out["rejected"])
    accuracy = sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(chosen)
    summary = json.loads((embedded_reward_model / "reward_summary.json").read_text())
    assert accuracy == pytest.approx(summary["held_out_pairwise_accuracy"])


def rl_recipe(algorithm: str, output: Path, reward_model: Path, *overrides: str):
    small = ["grpo.num_generations=4"] if algorithm == "grpo" else []
    return load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml",
        [f"rewards=[{{name: reward_model, path: '{reward_model}'}}]", "training.max_steps=2",
         "training.per_device_batch_size=16", f"run.output_dir={output}", "monitoring.wandb.mode=disabled",
         "monitoring.progress=false", *small, *overrides],
    )  # fmt: skip


def test_grpo_trains_with_it_as_a_reward_function(embedded_reward_model: Path, tmp_path: Path) -> None:
    recipe = rl_recipe("grpo", tmp_path, embedded_reward_model / "final")
    assert train(recipe)["status"] == "completed"
    assert all("rewards/reward_model/mean" in row for row in read_rows(tmp_path))


def test_ppo_trains_with_it_as_reward_model_and_critic_start(
    embedded_reward_model: Path, tmp_path: Path
) -> None:
    from llm_rl.algorithms.ppo.critic import load_value_model

    final = embedded_reward_model / "final"
    recipe = rl_recipe("ppo", tmp_path, final, "ppo.value_model=reward_model")
    components = build_components(recipe)
    critic = load_value_model(recipe, components.policy_path, components.tokenizer).state_dict()
    saved = reward_model_reward(path=str(final)).model.state_dict()
    for name, tensor in saved.items():
        torch.testing.assert_close(critic[name], tensor, rtol=0, atol=0, msg=name)
    assert train(recipe)["status"] == "completed"
    rows = read_rows(tmp_path)
    assert [row["step"] for row in rows] == [1, 2] and all("value/explained_variance" in row for row in rows)


def test_a_local_preference_file_with_margins_trains(tmp_path: Path) -> None:
    data = tmp_path / "prefs.jsonl"
    rows = [
        {"question": f"{a}+{b}=", "good": str(a + b), "bad": str((a + b + 3) % 19), "gap": 1.0}
        for a in range(10)
        for b in range(10)
    ]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "run"
    overrides = [
        f"data.source={data}", "data.prompt_column=question", "data.chosen_column=good",
        "data.rejected_column=bad", "data.margin_column=gap", "data.eval_fraction=0.2",
        "training.max_steps=3", f"run.output_dir={output}",
    ]  # fmt: skip
    result = run_entry(["reward_models/train.py", *sets(*overrides)], launcher=ACCELERATE, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((output / "reward_summary.json").read_text())
    assert (summary["train_pairs"], summary["held_out_pairs"], summary["steps"]) == (80, 20, 3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["training.learnig_rate=0.1"], "training.learnig_rate: unknown key (did you mean 'learning_rate'?)"),
        (["data.source=builtin:nope"], "builtin:nope"),
        (["data.chosen_column=better"], "no column 'better' (data.chosen_column)"),
        (["model.base=/no/such/model"], "/no/such/model"),
    ],
)
def test_bad_configs_exit_2_with_one_message(tmp_path: Path, overrides: list[str], message: str) -> None:
    output = tmp_path / "run"
    result = run_entry(
        ["reward_models/train.py", *sets(f"run.output_dir={output}", *overrides)],
        launcher=[sys.executable],
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert not output.exists(), "bad input must not create the run folder"


def test_shipped_reward_model_configs_load() -> None:
    from llm_rl.reward_model.train import load_reward_recipe

    for path in sorted((REPO / "reward_models" / "configs").glob("*.yaml")):
        assert load_reward_recipe(path, []).data.source.startswith("builtin:")

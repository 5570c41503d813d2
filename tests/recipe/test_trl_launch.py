"""`llm-rl migrate` of a TRL launch command kept in a shell file: the same recipe as the flat YAML of
the same settings, a row for the launcher, the environment and each unset variable, and clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.cli import main
from llm_rl.recipe.migration import migrate
from tests.conftest import LLM_RL, run_entry
from tests.recipe.test_migration import TRL_SCRIPT_STYLE, flat

# TRL_SCRIPT_STYLE's settings as the command a team keeps in a shell file.
TRL_SCRIPT_LAUNCH = """#!/usr/bin/env bash
set -e
export CUDA_VISIBLE_DEVICES=0,1
REWARD={reward_model}

# GRPO on DeepMath with a LoRA policy
accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml --num_processes 2 \\
    trl/scripts/grpo.py \\
    --model_name_or_path Qwen/Qwen2-0.5B-Instruct \\
    --dataset_name trl-lib/DeepMath-103K --dataset_train_split train --dataset_test_split test \\
    --reward_model_name_or_path $REWARD \\
    --reward_funcs think_format_reward my_pkg.rewards.brevity \\
    --use_peft --lora_r 32 --lora_alpha 64 --lora_dropout 0.1 --lora_target_modules q_proj v_proj \\
    --learning_rate 1e-6 --per_device_train_batch_size 8 --num_generations 4 \\
    --max_completion_length 256 --temperature 0.9 --epsilon 0.28 --epsilon_high 0.28 \\
    --loss_type dr_grpo --scale_rewards batch --num_iterations 2 --mask_truncated_completions true \\
    --max_steps 500 --save_steps 50 --report_to none \\
    --output_dir ${{OUTPUT_DIR:-runs/deepmath-grpo}} 2>&1 | tee train.log
"""


def launch_file(tmp_path: Path, text: str, name: str = "train_grpo.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_launch_command_migrates_as_the_flat_yaml_of_its_settings(
    tmp_path: Path, reward_model_dir: Path
) -> None:
    launch = launch_file(tmp_path, TRL_SCRIPT_LAUNCH.format(reward_model=reward_model_dir))
    from_yaml = migrate(flat(tmp_path, TRL_SCRIPT_STYLE, reward_model=str(reward_model_dir)), "ppo")
    from_launch = migrate(launch, "ppo", processes=2)
    assert from_launch.recipe == from_yaml.recipe
    notes = {row.source: row.note for row in from_launch.rows}
    assert (
        "accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml"
        in notes["(accelerate launch) --config_file"]
    )
    assert "--num_processes 2" in notes["(accelerate launch) --num_processes"]
    assert "not a recipe key" in notes["(environment) CUDA_VISIBLE_DEVICES"]
    assert notes["(script)"].startswith("line 7: accelerate launch trl/scripts/grpo.py")
    # Every flag of the command has its row, as every key of the YAML does.
    assert {
        "reward_funcs: think_format_reward",
        "reward_funcs: my_pkg.rewards.brevity",
        "use_peft",
        "lora_target_modules",
        "mask_truncated_completions",
    } <= set(notes)
    around = ("(script)", "(accelerate launch)", "(environment)")
    assert [row.source for row in from_launch.rows if not row.source.startswith(around)] == [
        row.source for row in from_yaml.rows
    ], "the launch's flags account for themselves as the YAML's keys do"


def test_an_unset_variable_is_a_placeholder_and_a_warning_never_an_empty_value(tmp_path: Path) -> None:
    launch = launch_file(
        tmp_path,
        "python trl/scripts/grpo.py --model_name_or_path builtin:tiny-arithmetic --reward_funcs accuracy "
        "--output_dir $SCRATCH/runs/grpo --max_steps 2\n",
    )
    migration = migrate(launch, "grpo")
    assert migration.recipe["run"]["output_dir"] == "${SCRATCH}/runs/grpo"
    (warning,) = [row for row in migration.warnings if row.source == "$SCRATCH"]
    assert "not set in train_grpo.sh" in warning.note and "placeholder" in warning.note


def test_a_file_of_several_commands_migrates_the_one_named(tmp_path: Path) -> None:
    launch = launch_file(
        tmp_path,
        "for_seed() { :; }\n"
        "python trl/scripts/grpo.py --model_name_or_path builtin:tiny-arithmetic --reward_funcs accuracy --beta 0.0\n"
        "python trl/scripts/grpo.py --model_name_or_path builtin:tiny-arithmetic --reward_funcs accuracy --beta 0.1\n",
    )
    output = tmp_path / "ppo.yaml"
    assert main(["migrate", str(launch), "--command", "2", "--to", "ppo", "-o", str(output)]) == 0
    assert migrate(launch, "ppo", command=2).recipe["ppo"]["kl_coef"] == 0.1
    refused = run_entry(
        ["migrate", str(launch), "-o", str(tmp_path / "x.yaml")], launcher=[LLM_RL], timeout=120
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "holds 2 launch commands" in refused.stderr and "--command N" in refused.stderr
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "python ppo.py --model_name gpt2 --ppo_epochs 4 --init_kl_coef 0.2\n",
            "step()-API PPOConfig of trl 0.11 and before (init_kl_coef, model_name, ppo_epochs)",
        ),
        ("pip install trl\n", "no command in this file runs a Python script"),
    ],
)
def test_launches_migrate_does_not_read_exit_2_naming_the_file(
    tmp_path: Path, command: str, expected: str
) -> None:
    launch = launch_file(tmp_path, command, name="launch.sh")
    target = tmp_path / "out.yaml"
    result = run_entry(["migrate", str(launch), "-o", str(target)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(launch) in result.stderr and expected in result.stderr
    assert not target.exists()


def test_command_is_refused_for_a_recipe(tmp_path: Path) -> None:
    recipe = flat(tmp_path, "model_name_or_path: builtin:tiny-arithmetic\nreward_funcs: [accuracy]\n")
    result = run_entry(
        ["migrate", str(recipe), "--command", "1", "-o", str(tmp_path / "o.yaml")],
        launcher=[LLM_RL],
        timeout=120,
    )
    assert result.returncode == 2 and "--command picks a launch command out of a shell file" in result.stderr


def test_flag_values_take_the_types_of_trl_fields() -> None:
    from llm_rl.recipe.launch_command import launch_commands, typed_flags
    from llm_rl.recipe.trl_launch import trl_field_types

    (command,) = launch_commands(
        "python grpo.py --learning_rate 1e-6 --save_steps 50 --warmup_ratio 0.1 --bf16 false --use_peft "
        "--no_gradient_checkpointing --reward_funcs accuracy --run_name 2024 --lora_target_modules q_proj "
        "--my_own_flag 3 --my_switch true\n"
    )
    assert typed_flags(command.flags, trl_field_types()) == {
        "learning_rate": 1e-6,
        "save_steps": 50,  # a float field, an integer literal: an int, as YAML reads it
        "warmup_ratio": 0.1,
        "bf16": False,
        "use_peft": True,
        "gradient_checkpointing": False,
        "reward_funcs": ["accuracy"],
        "run_name": "2024",
        "lora_target_modules": ["q_proj"],
        "my_own_flag": 3,
        "my_switch": True,
    }


def test_flags_the_shell_did_not_pass_are_a_warning_row(tmp_path: Path) -> None:
    launch = launch_file(
        tmp_path,
        "python trl/scripts/grpo.py --model_name_or_path builtin:tiny-arithmetic --reward_funcs accuracy\n"
        "    --beta 0.1\n",
    )
    migration = migrate(launch, "grpo")
    assert "beta" not in migration.recipe.get("grpo", {})
    (row,) = [row for row in migration.warnings if row.source == "(shell)"]
    assert "line 2 holds flags (beta) that the shell did not pass" in row.note

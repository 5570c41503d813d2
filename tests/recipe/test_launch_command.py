"""Launch commands read out of shell scripts as teams keep them: continuations, comments, exports,
`$VARS`, pipes and redirections, several commands in one file."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.errors import RecipeError
from llm_rl.recipe.launch_command import launch_commands, read_launch_file

# TRL's own ppo.py docstring command (trl 1.9-1.12), inside the shell a team wraps around it.
ZERO3_SCRIPT = """#!/bin/bash
# PPO on the descriptiveness task
export CUDA_VISIBLE_DEVICES=0,1,2,3
MODEL=EleutherAI/pythia-1b-deduped
OUT=${OUTPUT_ROOT:-runs}/ppo

accelerate launch --config_file examples/accelerate_configs/deepspeed_zero3.yaml \\
    examples/scripts/ppo/ppo.py \\
    --dataset_name trl-internal-testing/descriptiveness-sentiment-trl-style \\
    --dataset_train_split descriptiveness \\
    --output_dir $OUT \\
    --num_ppo_epochs 1 \\
    --report_to wandb tensorboard \\
    --model_name_or_path $MODEL \\
    --sft_model_path "${MODEL}" \\
    --reward_model_path $REWARD_MODEL \\
    --use_peft \\
    --kl_coef=0.05 \\
    --missing_eos_penalty 1.0 2>&1 | tee logs/ppo.log
"""


def test_a_wrapped_command_is_read_as_hf_argument_parser_reads_it() -> None:
    (command,) = launch_commands(ZERO3_SCRIPT)
    assert (command.line, command.launcher, command.script) == (
        7,
        "accelerate launch",
        "examples/scripts/ppo/ppo.py",
    )
    assert command.launcher_flags == {"config_file": "examples/accelerate_configs/deepspeed_zero3.yaml"}
    assert command.flags == {
        "dataset_name": "trl-internal-testing/descriptiveness-sentiment-trl-style",
        "dataset_train_split": "descriptiveness",
        "output_dir": "runs/ppo",
        "num_ppo_epochs": "1",
        "report_to": ["wandb", "tensorboard"],
        "model_name_or_path": "EleutherAI/pythia-1b-deduped",
        "sft_model_path": "EleutherAI/pythia-1b-deduped",
        "reward_model_path": "${REWARD_MODEL}",
        "use_peft": True,
        "kl_coef": "0.05",
        "missing_eos_penalty": "1.0",
    }
    # Never an empty string: a variable the file does not set stays a placeholder, and is named.
    assert command.unresolved == ["REWARD_MODEL"]
    assert command.environment == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}


def test_negative_values_and_python_options_are_not_flags() -> None:
    (command,) = launch_commands("python -u -i train_ppo.py --kl_coef -0.1 --temperature 0.7\n")
    assert command.launcher_flags == {"u": True, "i": True}
    assert command.flags == {"kl_coef": "-0.1", "temperature": "0.7"}


def test_commands_that_run_no_training_script_are_skipped() -> None:
    text = "\n".join(
        [
            "set -euo pipefail",
            "python -m pip install 'trl==0.11.4'",
            "mkdir -p runs && cd runs",
            "torchrun --nproc_per_node=8 ppo.py --total_episodes 1000 > out.log",
            "python -m torch.distributed.run --nproc_per_node 2 train.py --seed 3; echo done",
            "deepspeed --num_gpus 8 ppo.py --deepspeed ds_zero2.json &",
        ]
    )
    commands = launch_commands(text)
    assert [(c.line, c.launcher, c.script) for c in commands] == [
        (4, "torchrun", "ppo.py"),
        (5, "python -m torch.distributed.run", "train.py"),
        (6, "deepspeed", "ppo.py"),
    ]
    assert commands[0].launcher_flags == {"nproc_per_node": "8"}
    assert commands[0].flags == {"total_episodes": "1000"}, "the redirection is not a value"
    assert commands[1].flags == {"seed": "3"}
    assert commands[2].flags == {"deepspeed": "ds_zero2.json"}


def test_a_commented_out_flag_ends_the_command_as_the_shell_ends_it() -> None:
    text = "python ppo.py \\\n    --kl_coef 0.05 \\\n#    --whiten_rewards \\\n    --gamma 0.99\n"
    (command,) = launch_commands(text)
    assert command.flags == {"kl_coef": "0.05"}
    assert command.notes and "(gamma)" in command.notes[0]


def test_a_file_with_several_commands_names_them_and_takes_one_by_number(tmp_path: Path) -> None:
    script = tmp_path / "sweep.sh"
    script.write_text("python ppo.py --kl_coef 0.05\npython ppo.py --kl_coef 0.1\n")
    with pytest.raises(
        RecipeError, match=r"2 launch commands \(1: line 1: python ppo.py; 2: line 2: .*--command N"
    ):
        read_launch_file(script)
    assert read_launch_file(script, command=2).flags == {"kl_coef": "0.1"}
    with pytest.raises(RecipeError, match=r"--command 3: this file holds 2"):
        read_launch_file(script, command=3)


def test_a_file_without_a_launch_or_with_an_open_quote_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "setup.sh"
    empty.write_text("pip install trl\nexport WANDB_PROJECT=ppo\n")
    with pytest.raises(RecipeError, match="no command in this file runs a Python script") as caught:
        read_launch_file(empty)
    assert str(empty) in str(caught.value)
    broken = tmp_path / "broken.sh"
    broken.write_text("python ppo.py --run_name 'unfinished\n")
    with pytest.raises(RecipeError, match="line 1: cannot read the shell text"):
        read_launch_file(broken)


def test_flags_after_a_lost_line_continuation_are_not_read_and_the_launch_says_so() -> None:
    """TRL 0.12's ppo_tldr.py docstring lost a backslash after --dataset_name; a run copied from it
    trained without the flags below it, as the shell ran it."""
    text = (
        "python examples/scripts/ppo/ppo_tldr.py \\\n"
        "    --dataset_name trl-internal-testing/tldr-preference-sft-trl-style\n"
        "    --dataset_test_split validation \\\n"
        "    --learning_rate 3e-6\n"
        "export WANDB_PROJECT=ppo\n"
        "    --not_after_a_launch 1\n"
    )
    (command,) = launch_commands(text)
    assert command.flags == {"dataset_name": "trl-internal-testing/tldr-preference-sft-trl-style"}
    (note,) = command.notes
    assert note.startswith(
        "line 3 holds flags (dataset_test_split, learning_rate) that the shell did not pass to the command on line 1"
    )

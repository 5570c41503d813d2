"""TRL's PPO runs (trl 0.9-1.12) imported as PPO recipes that do what TRL's scripts did: the launch
commands of TRL's own docstrings, a YAML of the same fields, the legacy names, and a converted
`ppo_tldr.py` run that trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llm_rl.cli import main
from llm_rl.models.tiny import tiny_model_path
from llm_rl.recipe.migration import migrate
from tests.conftest import LLM_RL, rows, run_entry

# TRL 1.9-1.12's ppo_tldr.py docstring, its multi-GPU command as written there.
TLDR_ZERO2 = """accelerate launch --config_file examples/accelerate_configs/deepspeed_zero2.yaml \\
    examples/scripts/ppo/ppo_tldr.py \\
    --dataset_name trl-lib/tldr \\
    --dataset_test_split validation \\
    --output_dir pythia-1b-deduped-tldr-preference-sft-trl-style-ppo \\
    --per_device_train_batch_size 16 \\
    --gradient_accumulation_steps 4 \\
    --total_episodes 1000000 \\
    --model_name_or_path EleutherAI/pythia-1b-deduped \\
    --sft_model_path cleanrl/EleutherAI_pythia-1b-deduped__sft__tldr \\
    --reward_model_path cleanrl/EleutherAI_pythia-1b-deduped__reward__tldr \\
    --local_rollout_forward_batch_size 16 \\
    --missing_eos_penalty 1.0 \\
    --stop_token eos \\
    --eval_strategy steps \\
    --eval_steps 100
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trls_tldr_command_becomes_a_recipe_that_does_what_trls_script_did(tmp_path: Path) -> None:
    migration = migrate(write(tmp_path, "ppo_tldr.sh", TLDR_ZERO2), "ppo")
    recipe = migration.recipe
    # The policy and its reference from the SFT model, the tokenizer from model_name_or_path, the reward
    # and the critic's start from the reward model.
    assert recipe["model"]["policy"] == "cleanrl/EleutherAI_pythia-1b-deduped__sft__tldr"
    assert recipe["model"]["tokenizer"] == "EleutherAI/pythia-1b-deduped"
    assert recipe["rewards"] == [
        {
            "name": "reward_model",
            "path": "cleanrl/EleutherAI_pythia-1b-deduped__reward__tldr",
            "read": "tokens",
        }
    ]
    assert recipe["ppo"]["value_model"] == "reward_model"
    # The prompt column as text, no chat template, ppo_tldr.py's 512-token limit.
    assert recipe["data"] == {
        "source": "trl-lib/tldr",
        "prompt_column": "prompt",
        "chat_template": False,
        "max_prompt_length": 512,
    }
    # What TRL's trainer did whatever its keys said, and TRL 1.12's defaults where llm_rl's differ.
    assert recipe["ppo"]["stop_token"] == "eos"
    assert recipe["ppo"]["num_mini_batches"] == 1
    assert recipe["ppo"]["critic_learning_rate"] == recipe["training"]["learning_rate"] == 3e-6
    assert recipe["training"]["max_grad_norm"] is None
    assert recipe["training"]["lr_scheduler"] == "linear"
    assert recipe["training"]["total_samples"] == 1_000_000
    assert (
        recipe["training"]["per_device_batch_size"],
        recipe["training"]["gradient_accumulation_steps"],
    ) == (16, 4)
    assert recipe["generation"] == {"max_new_tokens": 53, "temperature": 0.7}
    assert recipe["ppo"]["missing_eos_penalty"] == 1.0 and recipe["ppo"]["kl_coef"] == 0.05
    assert recipe["model"]["dtype"] == "float32"
    sources = {row.source for row in migration.rows}
    flags = {
        "dataset_name", "dataset_test_split", "output_dir", "per_device_train_batch_size",
        "gradient_accumulation_steps", "total_episodes", "model_name_or_path", "sft_model_path",
        "reward_model_path", "local_rollout_forward_batch_size", "missing_eos_penalty", "stop_token",
        "eval_strategy", "eval_steps",
    }  # fmt: skip
    assert flags <= sources, "every flag of the command has its row"
    warned = {row.source: row.note for row in migration.warnings}
    assert "never evaluated" in warned["eval_strategy"]


def test_a_run_that_left_settings_out_gets_trls_defaults_and_the_word_on_what_they_meant(
    tmp_path: Path,
) -> None:
    """TRL's ppo.py docstring's single-GPU command: no model paths, no stop token, no budget of epochs."""
    command = (
        "python -i examples/scripts/ppo/ppo.py --dataset_name trl-internal-testing/descriptiveness-sentiment-trl-style "
        "--dataset_train_split descriptiveness --output_dir runs/ppo --per_device_train_batch_size 64 "
        "--gradient_accumulation_steps 1 --total_episodes 10000 --model_name_or_path EleutherAI/pythia-1b-deduped "
        "--missing_eos_penalty 1.0 --num_mini_batches 2\n"
    )
    migration = migrate(write(tmp_path, "ppo.sh", command), "ppo")
    recipe = migration.recipe
    assert recipe["model"]["policy"] == recipe["rewards"][0]["path"] == "EleutherAI/pythia-160m"
    assert recipe["ppo"]["stop_token"] is None, (
        "no stop token: completions run to response_length, as TRL's did"
    )
    # ppo.py trained on all but the last 100 rows of its split.
    assert recipe["data"]["split"] == "descriptiveness[:-100]" and "max_prompt_length" not in recipe["data"]
    notes = {row.source: row.note for row in migration.rows}
    assert "no stop" in notes["stop_token (TRL default)"]
    assert "sft_model_path (TRL default)" in notes
    warned = {row.source: row.note for row in migration.warnings}
    assert "once per PPO epoch" in warned["num_mini_batches"]


def test_trl_0_9_names_and_a_projects_own_flags_are_each_accounted_for(tmp_path: Path) -> None:
    command = (
        "accelerate launch --main_process_port 29504 src/train.py --sft_model_path m --reward_model_path r "
        "--non_eos_penalty --template_name qwen --train_file_dir data/ --use_liger_loss --whiten_advantages "
        "--kl_estimator k3 --report_to wandb tensorboard\n"
    )
    migration = migrate(write(tmp_path, "train.sh", command), "ppo")
    recipe = migration.recipe
    assert recipe["ppo"]["missing_eos_penalty"] == 1.0 and recipe["ppo"]["kl_estimator"] == "k3"
    assert recipe["monitoring"] == {"wandb": {"mode": "auto"}, "tensorboard": True}
    warned = {row.source: row.note for row in migration.warnings}
    assert "replaced the score" in warned["non_eos_penalty"]
    for flag in ("template_name", "train_file_dir", "use_liger_loss", "whiten_advantages"):
        assert "llm_rl cannot know what it did" in warned[flag]
    assert "data: section" in warned["template_name"] and "data: section" in warned["train_file_dir"]
    assert "data: section" not in warned["use_liger_loss"]
    assert "(script)" in {row.source for row in migration.rows}


def test_a_yaml_of_ppo_fields_imports_as_the_command_does(tmp_path: Path) -> None:
    source = write(
        tmp_path,
        "ppo.yaml",
        "sft_model_path: m\nreward_model_path: r\nmodel_name_or_path: m\nkl_coef: 0.1\nresponse_length: 32\n"
        "total_episodes: 4096\n",
    )
    command = write(
        tmp_path,
        "ppo.sh",
        "python train_ppo.py --sft_model_path m --reward_model_path r --model_name_or_path m --kl_coef 0.1 "
        "--response_length 32 --total_episodes 4096\n",
    )
    from_yaml, from_command = migrate(source, "ppo"), migrate(command, "ppo")
    assert from_yaml.recipe == from_command.recipe
    assert (
        from_yaml.recipe["ppo"]["kl_coef"] == 0.1 and from_yaml.recipe["generation"]["max_new_tokens"] == 32
    )


def test_the_step_api_ppo_config_is_refused_naming_its_keys(tmp_path: Path) -> None:
    source = write(
        tmp_path, "old.yaml", "model_name: gpt2\nppo_epochs: 4\ninit_kl_coef: 0.2\nadap_kl_ctrl: true\n"
    )
    result = run_entry(
        ["migrate", str(source), "-o", str(tmp_path / "o.yaml")], launcher=[LLM_RL], timeout=120
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "step()-API PPOConfig of trl 0.11 and before (adap_kl_ctrl, init_kl_coef, model_name, ppo_epochs)"
        in result.stderr
    )
    assert "adaptive KL" in result.stderr


@pytest.fixture(scope="module")
def reward_model_of_the_policy(tmp_path_factory) -> Path:
    """A reward model with the policy's tokenizer, as TRL's pairs are (pythia SFT and pythia reward)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = tmp_path_factory.mktemp("reward_model")
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path()).save_pretrained(folder)
    return folder


def test_the_converted_tldr_run_trains_with_local_models_swapped_in(
    tmp_path: Path, reward_model_of_the_policy: Path
) -> None:
    recipe = tmp_path / "ppo.yaml"
    assert main(["migrate", str(write(tmp_path, "ppo_tldr.sh", TLDR_ZERO2)), "-o", str(recipe)]) == 0
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}="}) + "\n" for a in range(8) for b in range(8))
    )
    run = tmp_path / "run"
    swaps = [
        f"model.policy={tiny_model_path()}",
        "model.tokenizer=null",
        f"rewards=[{{name: reward_model, path: '{reward_model_of_the_policy}', read: tokens}}]",
        f"data.source={prompts}",
        "training.per_device_batch_size=4",
        "training.gradient_accumulation_steps=2",
        "training.total_samples=8",
        "ppo.local_rollout_forward_batch_size=4",
        "generation.max_new_tokens=4",
        f"run.output_dir={run}",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
    ]
    result = run_entry(
        ["train", str(recipe), *[f"--set={swap}" for swap in swaps]], launcher=[LLM_RL], timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = rows(run)
    assert row["samples"] == 8
    ran = yaml.safe_load((run / "recipe.yaml").read_text())
    assert ran["ppo"]["value_model"] == "reward_model" and ran["ppo"]["stop_token"] == "eos"
    assert ran["training"]["max_grad_norm"] is None


def test_to_grpo_from_a_converted_trl_ppo_recipe(tmp_path: Path) -> None:
    """A team can try GRPO on the same data and reward model."""
    ppo = tmp_path / "ppo.yaml"
    grpo = tmp_path / "grpo.yaml"
    assert main(["migrate", str(write(tmp_path, "ppo_tldr.sh", TLDR_ZERO2)), "-o", str(ppo)]) == 0
    assert main(["migrate", str(ppo), "--to", "grpo", "-o", str(grpo)]) == 0
    converted = yaml.safe_load(grpo.read_text())
    assert converted["algorithm"] == "grpo"
    assert converted["rewards"] == [
        {
            "name": "reward_model",
            "path": "cleanrl/EleutherAI_pythia-1b-deduped__reward__tldr",
            "read": "tokens",
        }
    ]
    assert converted["data"]["source"] == "trl-lib/tldr"

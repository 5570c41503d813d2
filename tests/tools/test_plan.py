"""`llm-rl plan`: per-GPU memory from model configs alone, against numbers worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaConfig, Qwen2Config

from llm_rl.recipe.load import load_recipe
from llm_rl.tools.plan import FIXED_ALLOWANCE, GB, STRATEGIES, plan
from tests.conftest import LLM_RL, REPO, run_entry

GSM8K = REPO / "recipes" / "gsm8k"

# A config with no weights beside it: the plan must not need them.
# vocab 1000, hidden 64, 2 layers, 4 heads of 16, 2 key/value heads, MLP 128, untied output.
EMBED = 1000 * 64
LAYER = (64 * 64) * 2 + (64 * 32) * 2 + 3 * 64 * 128 + 2 * 64  # q, o; k, v; gate, up, down; 2 norms
POLICY = EMBED + 2 * LAYER + 64 + EMBED  # embeddings, layers, final norm, lm_head
CRITIC = EMBED + 2 * LAYER + 64 + 64  # ... and a one-output score head instead of lm_head


@pytest.fixture(scope="module")
def config_only(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("config-only")
    LlamaConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, tie_word_embeddings=False,
    ).save_pretrained(folder)  # fmt: skip
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]
    return folder


def small(algorithm: str, policy: Path, *overrides: str):
    """A small recipe on `policy`, loaded as `llm-rl plan` loads it: for another host's GPUs."""
    return load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml",
        [f"model.policy={policy}", "training.per_device_batch_size=4", "grpo.num_generations=4",
         "data.max_prompt_length=32", "generation.max_new_tokens=16", *overrides],
        on_this_host=False,
    )  # fmt: skip


def by_name(result, name: str):
    return next(e for e in result.estimates if e.strategy.name == name)


def test_grpo_under_zero2_matches_the_hand_count(config_only: Path) -> None:
    result = plan(small("grpo", config_only, "grpo.beta=0.04"), gpus=8, gpu_memory=80)
    assert [m.parameters for m in result.trainable] == [POLICY]
    assert [(m.name, m.parameters) for m in result.frozen] == [("reference", POLICY)]
    zero2 = by_name(result, "ZeRO-2")
    assert zero2.trainable == 2 * POLICY + 14 * POLICY // 8  # bf16 weights whole; grads + Adam split 8 ways
    assert zero2.frozen == 2 * POLICY
    tokens = 32 + 16
    assert zero2.activations == 34 * 4 * tokens * 64 * 2 + 4 * 4 * 16 * 1000  # 2 layers + completion logits
    assert zero2.generation == 2 * 2 * 32 * tokens * 4 * 2  # K and V, 2 layers, 32 wide, 4 sequences, bf16
    assert zero2.total == zero2.trainable + zero2.frozen + zero2.activations + FIXED_ALLOWANCE
    assert by_name(result, "DDP").trainable == 16 * POLICY


def test_ppo_under_zero3_matches_the_hand_count(config_only: Path) -> None:
    result = plan(small("ppo", config_only, "model.gradient_checkpointing=true"), gpus=8, gpu_memory=80)
    assert [(m.name, m.parameters) for m in result.trainable] == [("policy", POLICY), ("critic", CRITIC)]
    zero3 = by_name(result, "ZeRO-3")
    assert zero3.trainable == 16 * POLICY // 8 + 16 * CRITIC // 8
    assert zero3.frozen == 2 * POLICY // 8  # the reference, partitioned too
    tokens = 32 + 16
    kept = 2 * 4 * tokens * 64 * 2 + 34 * 4 * tokens * 64  # checkpointed layer inputs + one layer
    assert zero3.activations == (kept + 4 * 4 * 16 * 1000) + kept  # policy (completion logits) + critic
    # KV cache + the gathered engine: policy and critic
    assert zero3.generation == 2 * 2 * 32 * tokens * 4 * 2 + 2 * POLICY + 2 * CRITIC
    offload = by_name(result, "ZeRO-3 + CPU offload")
    assert offload.trainable == 2 * POLICY // 8 + 2 * CRITIC // 8


def test_lora_freezes_the_policy_and_keeps_no_second_reference(config_only: Path) -> None:
    result = plan(small("ppo", config_only, "model.lora.enabled=true"), gpus=1, gpu_memory=80)
    assert [m.name for m in result.trainable] == ["critic"]
    assert [m.name for m in result.frozen] == ["policy (LoRA base)"]
    assert [e.strategy.name for e in result.estimates] == ["one GPU"]


@pytest.fixture(scope="module")
def qwen_7b_shape(tmp_path_factory) -> Path:
    """Qwen2.5-7B's published architecture, as a config only."""
    folder = tmp_path_factory.mktemp("qwen7b")
    Qwen2Config(
        vocab_size=152064, hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        intermediate_size=18944, tie_word_embeddings=False, max_position_embeddings=32768,
    ).save_pretrained(folder)  # fmt: skip
    return folder


def test_seven_b_on_eight_80gb_gpus_needs_zero3_for_ppo_and_zero2_for_grpo(qwen_7b_shape: Path) -> None:
    ppo = plan(load_recipe(GSM8K / "ppo.yaml", [f"model.policy={qwen_7b_shape}"]), gpus=8, gpu_memory=80)
    grpo = plan(load_recipe(GSM8K / "grpo.yaml", [f"model.policy={qwen_7b_shape}"]), gpus=8, gpu_memory=80)
    assert 7.6e9 < ppo.trainable[0].parameters < 7.7e9  # Qwen2.5-7B: 7.62B
    assert ppo.recommended.strategy.name == "ZeRO-3"
    assert grpo.recommended.strategy.name == "ZeRO-2"
    # "GRPO needs about half of PPO's memory", on the same strategy:
    ratio = by_name(grpo, "ZeRO-3").total / by_name(ppo, "ZeRO-3").total
    assert 0.4 < ratio < 0.8
    assert [e.strategy for e in ppo.estimates] == list(STRATEGIES)


def test_plan_command_prints_the_table_and_the_recommendation(qwen_7b_shape: Path) -> None:
    result = run_entry(
        [
            "plan",
            str(GSM8K / "ppo.yaml"),
            "--set",
            f"model.policy={qwen_7b_shape}",
            "--gpus",
            "8",
            "--gpu-memory",
            "80",
        ],
        launcher=[LLM_RL],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "recommended: ZeRO-3, --config_file accelerate_configs/deepspeed_zero3.yaml" in result.stdout
    assert "the same models under GRPO" in result.stdout


def test_plan_with_nothing_that_fits_says_what_to_change(qwen_7b_shape: Path) -> None:
    result = plan(load_recipe(GSM8K / "ppo.yaml", [f"model.policy={qwen_7b_shape}"]), gpus=1, gpu_memory=24)
    assert result.recommended is None
    assert result.estimates[0].total > 24 * GB


def test_plan_of_a_missing_model_exits_2(tmp_path: Path) -> None:
    result = run_entry(
        ["plan", str(GSM8K / "grpo.yaml"), "--set", f"model.policy={tmp_path / 'nope'}"],
        launcher=[LLM_RL],
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "nope" in result.stderr


@pytest.mark.parametrize("name", ["grpo_7b", "ppo_7b"])
def test_the_7b_recipes_name_the_config_plan_recommends(qwen_7b_shape: Path, name: str) -> None:
    path = GSM8K / f"{name}.yaml"
    named = next(line for line in path.read_text().splitlines() if "--config_file" in line)
    result = plan(load_recipe(path, [f"model.policy={qwen_7b_shape}"]), gpus=8, gpu_memory=80)
    assert result.recommended is not None
    assert f"--config_file {result.recommended.strategy.config}" in named


def test_a_colocated_vllm_engine_holds_its_share_beside_training(config_only: Path) -> None:
    """vLLM reserves gpu_memory_utilization of each GPU and generates instead of transformers; with sleep
    mode the share is freed while the trainer steps. Planned without vLLM installed (it is for another host)."""
    vllm = ("generation.backend=vllm", "generation.vllm.gpu_memory_utilization=0.25")
    hf = by_name(plan(small("grpo", config_only), gpus=8, gpu_memory=80), "ZeRO-3")
    colocated = by_name(plan(small("grpo", config_only, *vllm), gpus=8, gpu_memory=80), "ZeRO-3")
    assert colocated.engine == 20 * GB and colocated.generation == 0
    assert colocated.total == hf.trainable + hf.frozen + 20 * GB + hf.activations + FIXED_ALLOWANCE
    sleeping = by_name(
        plan(small("grpo", config_only, *vllm, "generation.vllm.sleep_mode=true"), 8, 80),
        "ZeRO-3",
    )
    assert (sleeping.engine, sleeping.generation) == (0, 20 * GB)
    server = small("grpo", config_only, *vllm, "generation.vllm.mode=server")
    assert by_name(plan(server, gpus=8, gpu_memory=80), "ZeRO-3").engine == 0

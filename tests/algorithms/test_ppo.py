"""PPO end to end on llm_rl's own trainer: entry point, critic, warm-up, clipping, resume, tokenizers, advantages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback

from llm_rl.algorithms.base import build_components
from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.algorithms.ppo.critic import load_value_model
from llm_rl.algorithms.ppo.optimization import clip_each_group
from llm_rl.errors import RecipeError
from llm_rl.models.tiny import build_tokenizer, tiny_model_path
from llm_rl.recipe.load import load_recipe
from llm_rl.run.training import train
from llm_rl.training.checkpoints import CheckpointManager
from llm_rl.training.early_stopping import MetricWindow
from tests.conftest import ACCELERATE_LAUNCH, LLM_RL, REPO, rows, run_entry
from tests.ppo_clip_probe import RecordStepNorms

PPO_RECIPE = REPO / "recipes" / "arithmetic" / "ppo.yaml"
PPO_ROW_KEYS = {
    "step",
    "samples",
    "reward/mean",
    "reward/std",
    "rewards/accuracy/mean",
    "rewards/format/mean",
    "kl",
    "grad_norm",
    "value/grad_norm",
    "loss/policy",
    "loss/value",
    "value/explained_variance",
    "policy/clipfrac",
    "policy/approxkl",
    "learning_rate",
    "completion_length/mean",
    "samples_per_second",
    "peak_memory_mb",
}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def small_ppo_recipe(output_dir: Path, *overrides: str):
    """The embedded PPO recipe shrunk to 16 episodes an update, in-process."""
    return load_recipe(
        PPO_RECIPE,
        [
            "training.per_device_batch_size=16",
            "training.max_steps=2",
            f"run.output_dir={output_dir}",
            "monitoring.wandb.mode=disabled",
            "monitoring.progress=false",
            *overrides,
        ],
    )


def build_ppo_trainer(recipe, callbacks=()):
    """The trainer `llm_rl.run.training.train` builds, with the callback that completes checkpoints."""
    components = build_components(recipe)
    ppo.prepare(components)
    checkpoints = CheckpointManager(
        ppo.count_samples(recipe), None, MetricWindow.for_early_stopping(recipe.early_stopping)
    )
    return ppo.build_trainer(components, [checkpoints, *callbacks]), components


# --------------------------------------------------------------------------------------------------
# The embedded default through the entry point
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`recipes/ppo.py` with no recipe file, 3 updates, a checkpoint every 2."""
    output = tmp_path_factory.mktemp("ppo") / "run"
    result = run_entry(
        [
            "recipes/ppo.py",
            "--set", "training.max_steps=3",
            "--set", f"run.output_dir={output}",
            "--set", "checkpointing.every=2",
            "--set", "checkpointing.unit=steps",
            "--set", "monitoring.wandb.mode=offline",
        ]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return output


def test_ppo_demo_writes_the_run_folder(ppo_run: Path) -> None:
    summary = json.loads((ppo_run / "run_summary.json").read_text())
    assert (summary["status"], summary["algorithm"], summary["steps"], summary["samples"]) == (
        "completed",
        "ppo",
        3,
        3 * 64,
    )
    for name in ("recipe.yaml", "final/config.json", "final/tokenizer.json", "final/value_model/config.json"):
        assert (ppo_run / name).exists(), name
    assert list((ppo_run / "wandb").glob("offline-run-*/*.wandb")), "wandb wrote no offline run"


def test_ppo_rows_carry_the_unified_keys(ppo_run: Path) -> None:
    rows = read_jsonl(ppo_run / "metrics.jsonl")
    assert [row["samples"] for row in rows] == [64, 128, 192]
    for row in rows:
        assert row.keys() >= PPO_ROW_KEYS, PPO_ROW_KEYS - row.keys()
        assert 0.0 <= row["reward/mean"] <= 1.1
        assert row["grad_norm"] > 0 and row["value/grad_norm"] > 0
    # The critic starts at zero (fresh head): explained variance 0, then it learns.
    assert rows[0]["value/explained_variance"] == pytest.approx(0.0, abs=1e-6)


def test_ppo_checkpoints_hold_the_value_model(ppo_run: Path) -> None:
    names = sorted(p.name for p in ppo_run.glob("checkpoint-*"))
    assert names == ["checkpoint-128", "checkpoint-192"]
    for name in names:
        for part in (
            "model.safetensors",
            "optimizer.pt",
            "scheduler.pt",
            "rng_state.pth",
            "value_model/model.safetensors",
        ):
            assert (ppo_run / name / part).exists(), f"{name}/{part}"
    # The last checkpoint and final/ hold the same critic.
    saved = load_file(ppo_run / "checkpoint-192" / "value_model" / "model.safetensors")
    final = load_file(ppo_run / "final" / "value_model" / "model.safetensors")
    assert saved.keys() == final.keys()
    assert all(torch.equal(saved[key], final[key]) for key in saved)


def test_one_recipe_runs_under_both_algorithms(tmp_path: Path) -> None:
    """The same file: `recipes/grpo.py` and `recipes/ppo.py` only change `algorithm`."""
    recipe = tmp_path / "both.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "extends": str(REPO / "recipes" / "arithmetic" / "base.yaml"),
                "training": {"max_steps": 2, "per_device_batch_size": 16, "learning_rate": 1e-4},
                "monitoring": {"wandb": {"mode": "disabled"}, "progress": False},
                "grpo": {"num_generations": 4},
                "ppo": {"num_ppo_epochs": 1, "critic_learning_rate": 1e-3},
            }
        )
    )
    for algorithm in ("grpo", "ppo"):
        output = tmp_path / algorithm
        result = run_entry(
            [f"recipes/{algorithm}.py", "--config", str(recipe), "--set", f"run.output_dir={output}"]
        )
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((output / "run_summary.json").read_text())
        assert (summary["algorithm"], summary["status"], summary["steps"]) == (algorithm, "completed", 2)
        rows = read_jsonl(output / "metrics.jsonl")
        assert {"reward/mean", "rewards/accuracy/mean", "grad_norm", "loss/policy"} <= rows[-1].keys()


# --------------------------------------------------------------------------------------------------
# A critic from a reward model of another vocabulary
# --------------------------------------------------------------------------------------------------


def test_critic_with_another_vocabulary_is_refused(tmp_path: Path, reward_model_dir: Path) -> None:
    result = run_entry(
        ["validate", str(PPO_RECIPE), "--set", f"run.output_dir={tmp_path / 'run'}",
         "--set", f"rewards=[{{name: reward_model, path: {reward_model_dir}}}]",
         "--set", "ppo.value_model=reward_model"],
        launcher=[LLM_RL], timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error: " in result.stderr and "tokenizer's vocabulary differs from the policy's" in result.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------------
# The critic: initialisation, warm-up, saving
# --------------------------------------------------------------------------------------------------


def test_value_model_from_policy_has_the_policy_body_and_a_zero_head(tmp_path: Path) -> None:
    recipe = small_ppo_recipe(tmp_path / "run")
    policy = load_file(tiny_model_path() / "model.safetensors")
    critic = load_value_model(recipe, str(tiny_model_path()), build_tokenizer())
    state = critic.state_dict()
    assert torch.count_nonzero(critic.score.weight) == 0
    body = [key for key in policy if key.startswith("model.")]
    assert body and all(torch.equal(policy[key], state[key]) for key in body)


def save_reward_model(folder: Path) -> Path:
    """A sequence-classification model on the tiny policy's body with a random head, saved locally."""
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    torch.nn.init.normal_(model.score.weight, std=0.5)
    model.config.pad_token_id = 0
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def test_value_model_from_reward_model_and_from_a_path_keep_their_head(tmp_path: Path) -> None:
    folder = save_reward_model(tmp_path / "rm")
    saved = load_file(folder / "model.safetensors")
    from_reward_model = small_ppo_recipe(
        tmp_path / "run",
        "ppo.value_model=reward_model",
        f"rewards=[{{name: reward_model, path: {folder}}}]",
    )
    from_path = small_ppo_recipe(tmp_path / "run", f"ppo.value_model={folder}")
    for recipe in (from_reward_model, from_path):
        critic = load_value_model(recipe, str(tiny_model_path()), build_tokenizer())
        state = critic.state_dict()
        assert all(torch.equal(saved[key], state[key]) for key in saved)
        assert torch.count_nonzero(critic.score.weight) > 0


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[key], after[key]) for key in before)


def test_critic_warmup_freezes_the_policy_while_the_critic_learns(tmp_path: Path) -> None:
    """The policy is left out of the warm-up's optimizer steps altogether: no Adam state builds up."""
    recipe = small_ppo_recipe(tmp_path / "run", "training.max_steps=3", "ppo.critic_warmup_steps=2")
    trainer, _ = build_ppo_trainer(recipe)
    wrapper = trainer.model
    history = [(weights(wrapper.policy), weights(wrapper.critic))]
    recorder = RecordWeights(wrapper, history)
    trainer.add_callback(recorder)
    trainer.train()
    policy_parameters = set(wrapper.policy.parameters())
    assert recorder.policy_optimizer_states == [0, 0, len(policy_parameters)]
    assert len(history) == 4
    (policy_0, critic_0), (policy_1, critic_1), (policy_2, critic_2), (policy_3, _) = history
    assert not changed(policy_0, policy_1) and not changed(policy_1, policy_2), "policy moved during warm-up"
    assert changed(critic_0, critic_1) and changed(critic_1, critic_2), "critic did not learn during warm-up"
    assert changed(policy_2, policy_3), "policy did not train after warm-up"


class RecordWeights(TrainerCallback):
    """Copies the policy and critic weights after every update, and counts the policy's parameters that
    have optimizer state."""

    def __init__(self, wrapper, history) -> None:
        self.wrapper, self.history = wrapper, history
        self.policy_optimizer_states: list[int] = []

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        self.history.append((weights(self.wrapper.policy), weights(self.wrapper.critic)))
        policy = set(self.wrapper.policy.parameters())
        self.policy_optimizer_states.append(
            sum(1 for p, own in optimizer.state.items() if p in policy and own)
        )


def test_optimizer_groups_each_model_and_spares_biases_and_norms_weight_decay(tmp_path: Path) -> None:
    recipe = small_ppo_recipe(tmp_path / "run", "training.weight_decay=0.1", "ppo.critic_learning_rate=0.01")
    trainer, _ = build_ppo_trainer(recipe)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    groups = trainer.create_optimizer().param_groups
    assert sorted((g["name"], g["weight_decay"]) for g in groups) == [
        ("policy", 0.0), ("policy", 0.1), ("value", 0.0), ("value", 0.1)
    ]  # fmt: skip
    for group in groups:
        model = "policy." if group["name"] == "policy" else "critic."
        assert all(names[id(p)].startswith(model) for p in group["params"])
        assert group["lr"] == (recipe.training.learning_rate if group["name"] == "policy" else 0.01)
        norms = [names[id(p)] for p in group["params"] if "norm" in names[id(p)]]
        assert bool(norms) == (group["weight_decay"] == 0.0), "norm weights decay-free, the rest decayed"
    covered = sum(len(g["params"]) for g in groups)
    assert covered == sum(1 for p in trainer.model.parameters() if p.requires_grad)


def post_clip_norms(trainer) -> list[tuple[float, float]]:
    """The norms each optimizer step of `trainer.train()` will start from (filled as it trains)."""
    recorder = RecordStepNorms()
    trainer.add_callback(recorder)
    return recorder.norms


@pytest.mark.parametrize("max_grad_norm", [0.01, None])
def test_gradients_are_clipped_before_every_step(tmp_path: Path, max_grad_norm: float | None) -> None:
    recipe = small_ppo_recipe(
        tmp_path / "run", f"training.max_grad_norm={max_grad_norm if max_grad_norm is not None else 'null'}"
    )
    trainer, _ = build_ppo_trainer(recipe)
    norms = post_clip_norms(trainer)
    trainer.train()
    assert len(norms) == 2 * recipe.ppo["num_ppo_epochs"]
    logged = [row["grad_norm"] for row in trainer.state.log_history if "grad_norm" in row]
    assert logged and min(logged) > 0.01, "the test needs gradients larger than the limit"
    if max_grad_norm is None:
        assert max(policy for policy, _ in norms) > 0.01
    else:
        for policy, critic in norms:
            assert policy <= max_grad_norm * 1.0001 and critic <= max_grad_norm * 1.0001


def test_update_metrics_match_the_rollout_they_summarise(tmp_path: Path) -> None:
    trainer, _ = build_ppo_trainer(small_ppo_recipe(tmp_path / "run"))
    trainer.train()
    batch = trainer.rollout(next(trainer.prompt_batches()))
    stats = trainer.optimise(batch)
    metrics = trainer.update_metrics(batch, stats, warming_up=False)
    mask = batch.response_mask
    eos = trainer.processing_class.eos_token_id
    ended = batch.completion_ids.gather(1, batch.lengths[:, None]).squeeze(1) == eos
    expected = {
        "objective/kl": batch.kl.sum(1).mean(),
        "objective/entropy": (-batch.logprobs * mask).sum(1).mean(),
        "objective/scores": batch.scores.mean(),
        "objective/scores_std": batch.scores.std(),
        "completions/mean_length": (batch.lengths + 1).float().mean(),
        "completions/clipped_ratio": (~ended).float().mean(),
        "val/num_eos_tokens": ended.sum(),
        **stats,
    }
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(float(value), rel=1e-5, abs=1e-7), key
    for column, name in enumerate(trainer.rewards.rewards.names):
        assert metrics[f"rewards/{name}/mean"] == pytest.approx(
            batch.per_function[:, column].nanmean().item()
        )
    assert metrics["objective/rlhf_reward"] == pytest.approx(
        metrics["objective/non_score_reward"] + metrics["objective/scores"]
    )
    assert metrics["critic_warmup"] == 0.0


def gradient_groups(scales: list[float]) -> list[list[torch.nn.Parameter]]:
    """One group of three parameters per scale, with random gradients of about that size."""
    generator = torch.Generator().manual_seed(0)
    groups = []
    for scale in scales:
        group = [torch.nn.Parameter(torch.zeros(shape)) for shape in [(7, 5), (5,), (3, 4, 2)]]
        for parameter in group:
            parameter.grad = torch.randn(parameter.shape, generator=generator) * scale
        groups.append(group)
    return groups


def test_clip_each_group_matches_torch_and_leaves_small_gradients_alone() -> None:
    limit = 1.0
    ours, reference = gradient_groups([10.0, 0.01]), gradient_groups([10.0, 0.01])
    untouched = [parameter.grad.clone() for parameter in ours[1]]
    norms = clip_each_group(ours, limit)
    expected = [torch.nn.utils.clip_grad_norm_(group, limit) for group in reference]
    assert norms[0] > limit > norms[1], "one group must clip and one must not"
    for measured, want in zip(norms, expected, strict=True):
        assert torch.allclose(measured, want)
    for group, want in zip(ours, reference, strict=True):
        for parameter, reference_parameter in zip(group, want, strict=True):
            assert torch.allclose(parameter.grad, reference_parameter.grad, atol=1e-7)
    assert all(torch.equal(p.grad, g) for p, g in zip(ours[1], untouched, strict=True)), (
        "no multiply below the limit"
    )
    assert clip_each_group([[torch.nn.Parameter(torch.ones(2))]], limit)[0] == 0, "no gradient, norm 0"


def test_checkpointed_value_model_reloads_to_the_same_weights(tmp_path: Path) -> None:
    recipe = small_ppo_recipe(tmp_path / "run", "checkpointing.every=2", "checkpointing.unit=steps")
    trainer, _ = build_ppo_trainer(recipe)
    trainer.train()
    critic = trainer.model.critic
    reloaded = AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "run" / "checkpoint-32" / "value_model"
    )
    expected = critic.state_dict()
    assert all(torch.equal(expected[key], value) for key, value in reloaded.state_dict().items())


def straight_and_resumed(tmp_path: Path, make_recipe=small_ppo_recipe):
    """Trainers of 4 updates straight, and of 2 + 2 resumed from the checkpoint at 2 (16 samples an
    update); `make_recipe(output_dir, *overrides)` builds each recipe."""
    common = ["training.max_steps=4", "checkpointing.every=2", "checkpointing.unit=steps"]
    straight, _ = build_ppo_trainer(make_recipe(tmp_path / "straight", *common))
    straight.train()
    first, _ = build_ppo_trainer(make_recipe(tmp_path / "resumed", *common))
    first.args.max_steps = 2
    first.train()
    resumed, _ = build_ppo_trainer(make_recipe(tmp_path / "resumed", *common))
    resumed.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-32"))
    return straight, resumed


def test_resume_continues_exactly_where_the_run_stopped(tmp_path: Path) -> None:
    """4 updates straight, and 2 + 2 resumed from the checkpoint at 2, log the same rewards and losses."""
    straight, resumed = straight_and_resumed(tmp_path)
    assert_same_rows_after_resume(
        straight, resumed, ("objective/scores", "loss/policy_avg", "loss/value_avg", "grad_norm")
    )


def assert_same_rows_after_resume(straight, resumed, keys: tuple[str, ...]) -> None:
    """Updates 3 and 4 logged the same `keys` in both runs of `straight_and_resumed`."""

    def logged(trainer, step):
        row = next(row for row in trainer.state.log_history if row["step"] == step)
        return [row[key] for key in keys]

    assert resumed.state.global_step == 4
    for step in (3, 4):
        # The same samples (a different one would move the mean reward by 1/16); the rest equal up to
        # float summation order across threads.
        assert logged(resumed, step) == pytest.approx(logged(straight, step), rel=1e-4, abs=1e-6), step


def tied_policy(folder: Path) -> Path:
    """The embedded model with its LM head tied to its embeddings, as SmolLM2's and most small chat
    models' are: `save_pretrained` then leaves the head out of every checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_model_path())
    config.tie_word_embeddings = True
    model = AutoModelForCausalLM.from_config(config)
    weights = load_file(tiny_model_path() / "model.safetensors")
    del weights["lm_head.weight"]
    model.load_state_dict(weights, strict=False)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path()).save_pretrained(folder)
    return folder


def test_a_policy_with_a_tied_head_resumes(tmp_path: Path) -> None:
    """Its checkpoints lack `lm_head.weight`; resuming fills it from the embeddings it shares."""
    policy = tied_policy(tmp_path / "tied")
    common = [f"model.policy={policy}", "checkpointing.every=1", "checkpointing.unit=steps"]
    first, _ = build_ppo_trainer(small_ppo_recipe(tmp_path / "run", *common))
    first.args.max_steps = 1
    first.train()
    resumed, _ = build_ppo_trainer(small_ppo_recipe(tmp_path / "run", *common))
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-16"))
    assert resumed.state.global_step == 2
    head = resumed.model.policy.get_output_embeddings().weight
    assert head.data_ptr() == resumed.model.policy.get_input_embeddings().weight.data_ptr(), "still tied"


# --------------------------------------------------------------------------------------------------
# Bad PPO settings: exit code 2 and one message, before anything is written
# --------------------------------------------------------------------------------------------------


BAD_PPO = {
    "mini-batches that do not divide": (["ppo.num_mini_batches=3"], "ppo.num_mini_batches (3) must divide"),
    "whitening a tiny mini-batch": (
        ["training.per_device_batch_size=4", "ppo.whiten_rewards=true"],
        "ppo.whiten_rewards needs at least 8",
    ),
    "dataset smaller than a batch": (["data.limit=10"], "fewer than one PPO rollout batch"),
    "warm-up as long as the run": (
        ["training.max_steps=3", "ppo.critic_warmup_steps=3"],
        "would never train",
    ),
    "critic learning rate of the wrong type": (["ppo.critic_learning_rate=fast"], "ppo.critic_learning_rate"),
    "two stop tokens": (
        ["ppo.stop_token=eos", "ppo.stop_token_id=3"],
        "ppo.stop_token and ppo.stop_token_id",
    ),
    "missing value model folder": (["ppo.value_model=/no/such/critic"], "/no/such/critic"),
    "value model from a reward model that is not there": (
        ["ppo.value_model=reward_model"],
        "needs a `reward_model`",
    ),
    "unknown PPO key": (
        ["ppo.clip_range=0.2"],
        "ppo.clip_range: not a PPO key (TRL's PPOConfig names, llm_rl's own, or TrainingArguments fields) "
        "(did you mean 'cliprange'?)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PPO))
def test_bad_ppo_settings_exit_2(tmp_path: Path, case: str) -> None:
    overrides, expected = BAD_PPO[case]
    args = ["validate", str(PPO_RECIPE), "--set", f"run.output_dir={tmp_path / 'run'}"]
    for override in overrides:
        args += ["--set", override]
    result = run_entry(args, launcher=[LLM_RL], timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    messages = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(messages) == 1 and expected in messages[0], result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------------
# Chat-model tokenizers: pad == EOS, or no pad token at all
# --------------------------------------------------------------------------------------------------


def save_tokenizer_variant(folder: Path, kind: str) -> Path:
    """The embedded tokenizer with its pad token set to EOS (most chat models), or with neither pad nor
    UNK (Llama-3 style: the run's pad falls back to EOS)."""
    tokenizer = build_tokenizer()
    if kind == "pad is eos":
        tokenizer.pad_token = tokenizer.eos_token
    else:
        tokenizer.pad_token = None
        tokenizer.unk_token = None
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
@pytest.mark.parametrize("kind", ["pad is eos", "no pad token"])
def test_chat_style_tokenizers_train_under_both_algorithms(tmp_path: Path, kind: str, algorithm: str) -> None:
    """Both algorithms train with such a tokenizer, on prompts of different lengths (left padding with
    EOS), and `final/` keeps the tokenizer as the user gave it."""
    folder = save_tokenizer_variant(tmp_path / "tokenizer", kind)
    recipe = load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml",
        [
            f"model.tokenizer={folder}",
            "data.arithmetic.max_operand=30",
            "training.per_device_batch_size=16",
            "training.max_steps=2",
            "grpo.num_generations=4",
            f"run.output_dir={tmp_path / 'run'}",
            "monitoring.wandb.mode=disabled",
            "monitoring.progress=false",
        ],
    )
    summary = train(recipe)
    assert (summary["status"], summary["steps"]) == ("completed", 2)
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert all(math.isfinite(row["reward/mean"]) and math.isfinite(row["loss/policy"]) for row in rows)
    saved = AutoTokenizer.from_pretrained(tmp_path / "run" / "final")
    given = AutoTokenizer.from_pretrained(folder)
    assert (saved.pad_token, saved.unk_token, saved.eos_token) == (
        given.pad_token,
        given.unk_token,
        given.eos_token,
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [([], "eos"), (["ppo.stop_token_id=11"], [11]), (["ppo.stop_token=null"], [])],
)
def test_stop_tokens_follow_the_ppo_section(tmp_path: Path, overrides: list[str], expected) -> None:
    """EOS by default (every EOS id), a given id instead (TRL's stop_token_id), or none at all."""
    recipe = small_ppo_recipe(tmp_path / "run", *overrides)
    components = build_components(recipe)
    ids = ppo.stop_token_ids(ppo.ppo_settings(recipe), components)
    assert ids == ([components.tokenizer.eos_token_id] if expected == "eos" else expected)


@pytest.mark.floors
def test_lora_policy_trains_with_the_adapter_off_as_reference(tmp_path: Path) -> None:
    """With LoRA on there is no second policy copy: the reference is the policy with its adapter off."""
    recipe = small_ppo_recipe(tmp_path / "run", "model.lora.enabled=true", "model.lora.r=4")
    trainer, components = build_ppo_trainer(recipe)
    assert trainer.reference is None and trainer.is_peft_model
    policy = trainer.model.policy
    lora_before = {k: v.clone() for k, v in policy.state_dict().items() if "lora_B" in k}
    trainer.train()
    lora_after = {k: v for k, v in policy.state_dict().items() if "lora_B" in k}
    assert lora_before and changed(lora_before, lora_after), "the adapter did not train"
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "adapter_config.json").exists()
    assert (tmp_path / "final" / "value_model" / "model.safetensors").exists()


# --------------------------------------------------------------------------------------------------
# Two real processes (DDP over gloo on CPU)
# --------------------------------------------------------------------------------------------------

CPU_DDP = str(REPO / "accelerate_configs" / "cpu_ddp_2proc.yaml")


def test_ppo_in_two_processes_writes_metrics_once(tmp_path: Path) -> None:
    output = tmp_path / "run"
    result = run_entry(
        ["--config_file", CPU_DDP, "recipes/ppo.py",
         "--set", "training.max_steps=2", "--set", "training.per_device_batch_size=16",
         "--set", f"run.output_dir={output}", "--set", "monitoring.wandb.mode=disabled",
         "--set", "checkpointing.every=2", "--set", "checkpointing.unit=steps"],
        launcher=ACCELERATE_LAUNCH,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_jsonl(output / "metrics.jsonl")
    assert [row["samples"] for row in rows] == [32, 64], "two processes of 16 episodes, one row per update"
    assert (output / "checkpoint-64" / "value_model" / "model.safetensors").exists()
    assert (output / "final" / "value_model" / "model.safetensors").exists()


def test_ddp_gradients_are_clipped_on_every_rank(tmp_path: Path) -> None:
    output = tmp_path / "run"
    overrides = ["training.max_steps=2", "training.per_device_batch_size=16", "training.max_grad_norm=0.01",
                 f"run.output_dir={output}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"]  # fmt: skip
    result = run_entry(
        ["--config_file", CPU_DDP, str(REPO / "tests" / "ppo_clip_probe.py"), str(PPO_RECIPE), *overrides],
        launcher=ACCELERATE_LAUNCH,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        probe = json.loads((output / f"norms-rank{rank}.json").read_text())
        assert probe["world_size"] == 2
        assert len(probe["norms"]) == 2 * 2  # 2 updates x 2 PPO epochs
        assert min(probe["logged_grad_norm"]) > 0.01, "the test needs gradients larger than the limit"
        for policy, critic in probe["norms"]:
            assert policy <= 0.01 * 1.0001 and critic <= 0.01 * 1.0001


# --------------------------------------------------------------------------------------------------
# Advantage normalisation and the entropy bonus, onto the trainer
# --------------------------------------------------------------------------------------------------


def test_ppo_whitening_settings_reach_the_trainer(tmp_path: Path) -> None:
    from llm_rl.algorithms.base import build_components
    from llm_rl.algorithms.ppo.algorithm import build_trainer

    overrides = [
        f"run.output_dir={tmp_path}",
        "advantages.normalize=none",
        "advantages.whiten_rewards=true",
        "training.per_device_batch_size=16",
    ]
    recipe = load_recipe(REPO / "recipes" / "arithmetic" / "ppo.yaml", overrides)
    trainer = build_trainer(build_components(recipe), [])
    assert trainer.whiten_advantages is False
    assert trainer.settings.whiten_rewards is True
    default = load_recipe(REPO / "recipes" / "arithmetic" / "ppo.yaml", overrides[:1] + overrides[3:])
    assert build_trainer(build_components(default), []).whiten_advantages is True


def test_ppo_entropy_bonus_raises_the_policy_entropy(tmp_path: Path) -> None:
    """Three updates at a high learning rate, with and without a large entropy bonus, from one seed."""
    entropy = {}
    for coef in (0.0, 1.0):
        output = tmp_path / f"coef-{coef}"
        result = run_entry(
            [
                "recipes/ppo.py",
                *("--set", f"run.output_dir={output}", "--set", "monitoring.wandb.mode=disabled"),
                *("--set", "training.per_device_batch_size=16", "--set", "training.total_samples=48"),
                *("--set", "training.learning_rate=3e-3", "--set", f"ppo.entropy_coef={coef}"),
                *("--set", "monitoring.progress=false"),
            ]
        )
        assert result.returncode == 0, result.stderr[-3000:]
        entropy[coef] = [row["entropy"] for row in rows(output)]
    # Entropy is measured in the optimisation passes, so the bonus shows from the first update on.
    assert all(bonus > plain * 1.05 for bonus, plain in zip(entropy[1.0], entropy[0.0], strict=True))


# --------------------------------------------------------------------------------------------------
# A DeepSpeed config's own optimizer
# --------------------------------------------------------------------------------------------------


def test_ppo_refuses_a_deepspeed_optimizer_that_would_replace_its_own(
    deepspeed_launch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A DeepSpeed config's optimizer has one parameter group: the critic's learning rate and warm-up
    would be lost without a word."""
    from llm_rl.algorithms.ppo import algorithm as ppo
    from llm_rl.recipe.load import load_recipe

    config = tmp_path / "ds.json"
    config.write_text(
        json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "gradient_clipping": "auto",
                    "zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"})
    )  # fmt: skip
    deepspeed_launch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(config))
    recipe = load_recipe(REPO / "recipes" / "arithmetic" / "ppo.yaml", [f"run.output_dir={tmp_path / 'run'}"])
    with pytest.raises(
        RecipeError, match="the DeepSpeed config sets optimizer, which would replace PPO's own"
    ):
        ppo.trainer_config(recipe)


# --------------------------------------------------------------------------------------------------
# Generation backends and the rollout batch
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["static", "paged"])
def test_ppo_trains_with_each_generation_backend(tmp_path: Path, backend: str) -> None:
    """Two updates whose rollouts are generated 8 prompts a call by the backend."""
    recipe = small_ppo_recipe(tmp_path, f"generation.backend={backend}", "generation.batch_size=8")
    trainer, _ = build_ppo_trainer(recipe)
    assert (trainer.sampling.backend, trainer.generation_chunk_size) == (backend, 8)
    trainer.train()
    assert trainer.state.global_step == 2


def test_ppo_rollout_batch_defaults_to_the_forward_chunk_and_is_capped_by_the_rollout(tmp_path: Path) -> None:
    assert ppo.generation_batch(small_ppo_recipe(tmp_path)) == 16
    assert ppo.generation_batch(small_ppo_recipe(tmp_path, "generation.batch_size=4")) == 4
    with pytest.raises(RecipeError, match=r"generation.batch_size \(32\) is above PPO's rollout batch of 16"):
        small_ppo_recipe(tmp_path, "generation.batch_size=32")

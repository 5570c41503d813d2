"""The recipe: one typed, strict schema for both algorithms, and the loader that reads it.

A recipe is YAML. `extends: base.yaml` (relative to the file) deep-merges a base recipe under it, and
`--set dotted.key=value` overrides (the value parsed as YAML) apply last. Every error names the file
and the dotted key. The shared sections are in our own words; `grpo:` and `ppo:` take TRL field names.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.run_folder import stage_folder

# ----------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, values are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


class RunSection(Section):
    # Shown in logs and on wandb; defaults to "<algorithm>-<task>".
    name: str | None = None
    # The run folder: recipe.yaml, metrics.jsonl, checkpoints, final/, run_summary.json.
    output_dir: str | None = None
    seed: int = 42


class LoraSection(Section):
    enabled: bool = False
    r: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    # "all-linear" or a list of module names.
    target_modules: str | list[str] = "all-linear"


class ModelSection(Section):
    # A local folder, a hub id (online users), or "builtin:tiny-arithmetic".
    policy: str = "builtin:tiny-arithmetic"
    # Defaults to the policy's own tokenizer.
    tokenizer: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # Off unless a recipe turns it on: remote code runs with the user's rights.
    trust_remote_code: bool = False
    attn_implementation: str | None = None
    gradient_checkpointing: bool = False
    lora: LoraSection = Field(default_factory=LoraSection)


class ArithmeticTaskSection(Section):
    """Settings of the built-in arithmetic task (`data.source: builtin:arithmetic`)."""

    # Operands are drawn uniformly from min_operand..max_operand (inclusive; min_operand <= max_operand).
    # Single digits by default: two-digit sums do not learn on a CPU (DESIGN.md).
    min_operand: int = Field(0, ge=0, le=99)
    # The largest operand; the embedded tiny model is warmed up on 0..9.
    max_operand: int = Field(9, ge=1, le=99)
    # Rows of the train split (drawn with replacement, seeded by run.seed).
    num_train: int = Field(2000, gt=0)
    # Rows of the eval split, drawn with another seed; 0: no eval split.
    num_eval: int = Field(200, ge=0)


class DataSection(Section):
    # A local jsonl/json/parquet/csv file, a save_to_disk folder, a hub id, or "builtin:<task>".
    source: str = "builtin:arithmetic"
    split: str = "train"
    # A split of the same source for held-out prompts: none by default for files and folders, the task's
    # own "eval" split by default for builtin tasks.
    eval_split: str | None = None
    prompt_column: str = "prompt"
    # Extra columns passed to the reward functions as keyword arguments; None: all of them.
    columns: list[str] | None = None
    # Renames applied before anything else, {old: new}.
    rename_columns: dict[str, str] = Field(default_factory=dict)
    system_prompt: str | None = None
    # Apply the tokenizer's chat template (when it has one) to plain-text prompts too.
    chat_template: bool = True
    # Prompts longer than this (in tokens) are dropped and counted, never truncated.
    max_prompt_length: int | None = Field(None, gt=0)
    # Keep at most this many rows (after shuffling with the run seed); None keeps all.
    limit: int | None = Field(None, gt=0)
    arithmetic: ArithmeticTaskSection = Field(default_factory=ArithmeticTaskSection)


class RewardEntry(BaseModel):
    """One reward function: `name` from the registry or `package.module:function`; other keys go to it."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str
    weight: float = 1.0
    # What a None, NaN or inf from this function does: "error" fails the run naming the sample,
    # "skip" drops the sample from this reward (counted under rewards/<name>/skipped).
    on_invalid: Literal["error", "skip"] = "error"
    # Metric name; defaults to `name` (or the function's name for import paths).
    alias: str | None = None

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keys meant for the reward factory."""
        return dict(self.model_extra or {})

    @property
    def metric_name(self) -> str:
        if self.alias:
            return self.alias
        return self.name.rsplit(":", 1)[-1]


class GenerationSection(Section):
    max_new_tokens: int = Field(256, gt=0)
    # EOS is held back until a completion has this many tokens (benchmarks, or against empty answers).
    min_new_tokens: int | None = Field(None, gt=0)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)


class TrainingSection(Section):
    learning_rate: float = Field(1e-6, ge=0.0)
    # The budget: one of max_steps (optimizer updates) or total_samples (prompt-completion pairs).
    max_steps: int | None = Field(None, gt=0)
    total_samples: int | None = Field(None, gt=0)
    # Clips the gradient norm of every update; None or 0 turns clipping off.
    max_grad_norm: float | None = Field(1.0, ge=0.0)
    # Prompt-completion pairs per device per micro-batch (TRL's per_device_train_batch_size).
    per_device_batch_size: int = Field(8, gt=0)
    gradient_accumulation_steps: int = Field(1, gt=0)
    lr_scheduler: str = "constant"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    # "auto": bf16 where the GPU supports it, fp32 on CPU.
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    logging_steps: int = Field(1, gt=0)


class CheckpointingSection(Section):
    every: int = Field(100_000, gt=0)
    unit: Literal["samples", "steps"] = "samples"
    keep_last: int | None = Field(2, gt=0)
    # "auto": continue from the latest complete checkpoint in output_dir; "never"; or a path.
    resume: str = "auto"


class EarlyStoppingSection(Section):
    """Stop when the metric, averaged over each round of logging rows, stops improving."""

    enabled: bool = False
    # A key of metrics.jsonl.
    metric: str = "reward/mean"
    # Rounds without an improvement of more than min_delta over the best round before stopping.
    patience: int = Field(5, gt=0)
    min_delta: float = Field(0.0, ge=0.0)
    # Logging rows per round; the round's mean is the smoothed value compared (RL rewards are noisy).
    rows_per_round: int = Field(10, gt=0)
    mode: Literal["max", "min"] = "max"


class WandbSection(Section):
    # "auto": online when logged in, offline otherwise.
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    project: str = "llm_rl"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = Field(default_factory=list)


AlertAction = Literal["warn", "stop", "off"]


class BoundAlert(Section):
    """Fires when a metric goes above `above`."""

    above: float = Field(gt=0.0)
    # warn: log it and go on; stop: save the last good state and end with status stopped_by_alert.
    action: AlertAction = "warn"


class CollapseAlert(Section):
    """Fires when every sample got the same reward (`reward/std` 0) for `rows` rows in a row."""

    rows: int = Field(20, gt=0)
    action: AlertAction = "warn"


class NonFiniteAlert(Section):
    """Fires on NaN or inf in a loss, the reward or the gradient norm."""

    action: AlertAction = "stop"


class AlertsSection(Section):
    grad_norm: BoundAlert = Field(default_factory=lambda: BoundAlert(above=100.0))
    kl: BoundAlert = Field(default_factory=lambda: BoundAlert(above=10.0))
    value_loss: BoundAlert = Field(default_factory=lambda: BoundAlert(above=100.0))
    reward_collapse: CollapseAlert = Field(default_factory=CollapseAlert)
    nonfinite: NonFiniteAlert = Field(default_factory=NonFiniteAlert)


class EvaluationSection(Section):
    """Reward on the data's eval split (`llm_rl.evaluation`)."""

    # Evaluate every this many updates (a multiple of training.logging_steps); null: never.
    every: int | None = Field(None, gt=0)
    # Greedy completions (steadier for early stopping); false samples as the generation section says.
    greedy: bool = True
    # Eval prompts per generate call and process.
    batch_size: int = Field(64, gt=0)


class PrometheusSection(Section):
    """The unified metrics at http://host:port/metrics while training (main process only)."""

    # None: no endpoint.
    port: int | None = Field(None, ge=1, le=65535)
    # Loopback by default; "0.0.0.0" lets a Prometheus server on another host scrape it.
    host: str = "127.0.0.1"


class MonitoringSection(Section):
    wandb: WandbSection = Field(default_factory=WandbSection)
    prometheus: PrometheusSection = Field(default_factory=PrometheusSection)
    alerts: AlertsSection = Field(default_factory=AlertsSection)
    tensorboard: bool = False
    # Print a progress bar and a line of metrics at every logging step.
    progress: bool = True


class AdvantagesSection(Section):
    """How rewards become advantages, in one key for both algorithms (docs/operations.md, when each helps).

    `normalize`: `group` divides each completion's advantage by its group's reward spread (GRPO only:
    PPO has no groups), `batch` by the spread over the whole batch (for PPO: whitening the GAE
    advantages), `none` only centres them (GRPO: Dr. GRPO's choice) or leaves them raw (PPO).
    `auto` is each algorithm's usual choice: group for GRPO, batch for PPO.
    """

    normalize: Literal["auto", "group", "batch", "none"] = "auto"
    # PPO only: whiten the per-token rewards before GAE (TRL's whiten_rewards), for rewards on very
    # different scales across the run.
    whiten_rewards: bool = False


class ConstantSchedule(Section):
    kind: Literal["constant"]
    value: float

    def value_at(self, samples: int) -> float:
        return self.value


class RampSchedule(Section):
    """From `start` to `end` over `samples` samples, beginning `begin` samples into the run."""

    start: float
    end: float
    samples: int = Field(gt=0)
    begin: int = Field(0, ge=0)

    def progress(self, samples: int) -> float:
        """How far along the ramp the run is at `samples`: 0 before it, 1 after it."""
        return min(max(samples - self.begin, 0) / self.samples, 1.0)


class LinearSchedule(RampSchedule):
    """A straight line from `start` to `end`."""

    kind: Literal["linear"]

    def value_at(self, samples: int) -> float:
        return self.start + (self.end - self.start) * self.progress(samples)


class CosineSchedule(RampSchedule):
    """A half cosine from `start` to `end` (slow at both ends)."""

    kind: Literal["cosine"]

    def value_at(self, samples: int) -> float:
        return self.end + (self.start - self.end) * 0.5 * (1.0 + math.cos(math.pi * self.progress(samples)))


class StepSchedule(Section):
    """`start`, multiplied by `factor` every `every` samples (0.5: halving), never past `limit`."""

    kind: Literal["step"]
    start: float
    factor: float = Field(gt=0.0)
    every: int = Field(gt=0)
    limit: float | None = None

    def value_at(self, samples: int) -> float:
        value = self.start * self.factor ** (samples // self.every)
        if self.limit is None:
            return value
        return max(value, self.limit) if self.factor < 1 else min(value, self.limit)


Schedule = Annotated[
    ConstantSchedule | LinearSchedule | CosineSchedule | StepSchedule, Field(discriminator="kind")
]


class StageEntry(Section):
    """One stage of a staged run: a budget, and recipe keys that differ from the recipe's own."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    # The stage's budget: one of these, as in training.
    max_steps: int | None = Field(None, gt=0)
    total_samples: int | None = Field(None, gt=0)
    # Recipe sections merged over the recipe for this stage (e.g. {grpo: {num_generations: 16}}).
    overrides: dict[str, Any] = Field(default_factory=dict)


class Recipe(Section):
    """A whole recipe. `grpo` and `ppo` hold TRL field names, checked in `check_trl_sections`."""

    algorithm: Literal["grpo", "ppo"] = "grpo"
    run: RunSection = Field(default_factory=RunSection)
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    rewards: list[RewardEntry] = Field(default_factory=lambda: [RewardEntry(name="accuracy")])
    generation: GenerationSection = Field(default_factory=GenerationSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    checkpointing: CheckpointingSection = Field(default_factory=CheckpointingSection)
    early_stopping: EarlyStoppingSection = Field(default_factory=EarlyStoppingSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    monitoring: MonitoringSection = Field(default_factory=MonitoringSection)
    advantages: AdvantagesSection = Field(default_factory=AdvantagesSection)
    # Scalar settings that change over the run, by dotted key (SCHEDULABLE), in samples since the start.
    schedules: dict[str, Schedule] = Field(default_factory=dict)
    # Stages run one after another in one run folder, each warm-started from the one before.
    stages: list[StageEntry] = Field(default_factory=list)
    grpo: dict[str, Any] = Field(default_factory=dict)
    ppo: dict[str, Any] = Field(default_factory=dict)

    @field_validator("rewards")
    @classmethod
    def _at_least_one_reward(cls, rewards: list[RewardEntry]) -> list[RewardEntry]:
        if not rewards:
            raise ValueError("at least one reward function is needed")
        return rewards

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as plain data, as it is written to the run folder."""
        return self.model_dump(mode="json")

    @property
    def output_dir(self) -> Path:
        return Path(self.run.output_dir or f"runs/{self.run_name}")

    @property
    def run_name(self) -> str:
        if self.run.name:
            return self.run.name
        # builtin:arithmetic -> arithmetic; ../data/gsm8k or openai/gsm8k -> gsm8k; data/math.jsonl -> math.
        task = Path(self.data.source.split(":", 1)[-1].rstrip("/")).stem
        return f"{self.algorithm}-{task}"


class PPOSettings(BaseModel):
    """The `ppo:` section: TRL's PPOConfig keys under their names and defaults (llm_rl runs its own PPO,
    with the same maths), plus llm_rl's own keys. Any other `ppo:` key must be a field of transformers'
    `TrainingArguments` (the optimizer's betas, say), handed to the trainer as it is."""

    model_config = ConfigDict(extra="allow", strict=True, validate_assignment=True)

    # --- TRL's PPOConfig keys (same names, same defaults) ---
    # Passes over each rollout batch.
    num_ppo_epochs: int = Field(4, gt=0)
    # Mini-batches each pass splits the rollout batch into: one optimizer step each.
    num_mini_batches: int = Field(1, gt=0)
    # Weight of the per-token KL penalty against the reference model, subtracted from the reward.
    kl_coef: float = Field(0.05, ge=0.0)
    # The KL estimator (http://joschu.net/blog/kl-approx.html): k1 = log p - log q; k3 = (r - 1) - log r.
    kl_estimator: Literal["k1", "k3"] = "k1"
    # How far the probability ratio may move from 1 before the policy loss stops rewarding the move.
    cliprange: float = Field(0.2, gt=0.0)
    # How far a new value may move from the rollout's before the value loss stops rewarding the move.
    cliprange_value: float = Field(0.2, gt=0.0)
    # Weight of the value loss in the loss.
    vf_coef: float = Field(0.1, ge=0.0)
    # Discount factor of GAE.
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    # GAE's lambda: 1 uses whole returns, 0 one-step differences.
    lam: float = Field(0.95, ge=0.0, le=1.0)
    # Whiten the per-token rewards before GAE (also advantages.whiten_rewards).
    whiten_rewards: bool = False
    # Subtracted from the score of a completion that reached the length limit without a stop token.
    missing_eos_penalty: float | None = Field(None, ge=0.0)
    # Where a response ends: "eos" at the first EOS token (every EOS id of the policy's generation config
    # counts); null at the length limit only. TRL's default is null; llm_rl's is eos, for chat models.
    stop_token: Literal["eos"] | None = "eos"
    # A token id that ends responses instead of EOS (then stop_token is not set, or null).
    stop_token_id: int | None = Field(None, ge=0)
    # Rollout sequences per no-grad forward pass (log-probs, reference, values) and per generate call.
    local_rollout_forward_batch_size: int = Field(64, gt=0)
    # Under DeepSpeed ZeRO-3: gather the whole policy (and the critic, one engine with it) to generate
    # (fast; needs both to fit on one GPU), or generate shard by shard.
    ds3_gather_for_generation: bool = True
    # Processes that tokenize the prompts; None: this process.
    dataset_num_proc: int | None = Field(None, gt=0)
    # TRL printed sample tables this many times a run; llm_rl has evaluation.every and `llm-rl sample`.
    num_sample_generations: Literal[0] = 0

    # --- llm_rl's own keys ---
    # The critic's weights: "policy" (a fresh scalar head on the policy), "reward_model", or a folder.
    value_model: str = "policy"
    # The critic's learning rate; None: training.learning_rate.
    critic_learning_rate: float | None = Field(None, ge=0.0)
    # Updates at the start in which only the critic learns (the policy is frozen).
    critic_warmup_steps: int = Field(0, ge=0)
    # The score of a sample for which every reward function returned None (not applicable).
    none_reward: float = 0.0
    # A bonus for the policy's per-token entropy, subtracted from the loss (0: none, TRL's behaviour).
    entropy_coef: float = Field(0.0, ge=0.0)

    @property
    def training_arguments(self) -> dict[str, Any]:
        """The section's `TrainingArguments` keys (checked by `check_trl_sections`)."""
        return dict(self.model_extra or {})


# PPOConfig keys that meant something only inside TRL's PPOTrainer, with what to use instead.
PPO_REFUSED_KEYS = {
    "sft_model_path": "the policy is model.policy",
    "reward_model_path": "a reward model is a reward: rewards: [{name: reward_model, path: ...}]",
    "model_adapter_name": "LoRA is model.lora: one adapter, and the reference is the policy with it off",
    "ref_adapter_name": "LoRA is model.lora: one adapter, and the reference is the policy with it off",
    "push_to_hub": "training never pushes to a hub; `llm-rl export` writes a folder to upload",
    **dict.fromkeys(
        ("world_size", "num_total_batches", "micro_batch_size", "local_batch_size", "batch_size",
         "local_mini_batch_size", "mini_batch_size"),
        "computed from training.per_device_batch_size, training.gradient_accumulation_steps, "
        "ppo.num_mini_batches and the number of processes; set those instead",
    ),
}  # fmt: skip


def ppo_settings(recipe: Recipe) -> PPOSettings:
    """The recipe's `ppo:` section, type-checked, with errors naming the key."""
    try:
        return PPOSettings.model_validate(recipe.ppo)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise RecipeError(f"ppo.{key}: {first['msg'].lower()}") from None


# Fields of TRL's configs that the shared sections own: setting them in grpo:/ppo: would make two
# places say the same thing, so it is an error naming the shared key to use instead.
SHARED_TRL_FIELDS = {
    "learning_rate": "training.learning_rate",
    "max_steps": "training.max_steps",
    "max_grad_norm": "training.max_grad_norm",
    "per_device_train_batch_size": "training.per_device_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "lr_scheduler_type": "training.lr_scheduler",
    "warmup_ratio": "training.warmup_ratio",
    "weight_decay": "training.weight_decay",
    "logging_steps": "training.logging_steps",
    "bf16": "training.precision",
    "fp16": "training.precision",
    "seed": "run.seed",
    "output_dir": "run.output_dir",
    "run_name": "run.name",
    "temperature": "generation.temperature",
    "top_p": "generation.top_p",
    "top_k": "generation.top_k",
    "max_completion_length": "generation.max_new_tokens",
    "response_length": "generation.max_new_tokens",
    "total_episodes": "training.total_samples",
    "save_steps": "checkpointing.every",
    "save_total_limit": "checkpointing.keep_last",
    "resume_from_checkpoint": "checkpointing.resume",
    "report_to": "monitoring.wandb.mode",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "trust_remote_code": "model.trust_remote_code",
    "reward_weights": "rewards[].weight",
}


# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------


class RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `3e-4` as a number the way YAML 1.2 does (PyYAML reads a string)."""


RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    """Parse YAML text with the recipe loader (no tags that build objects: never code)."""
    return yaml.load(text, Loader=RecipeLoader)  # noqa: S506 - a SafeLoader subclass


def load_recipe(path: str | Path | None, overrides: list[str] | None = None) -> Recipe:
    """Read a recipe file (None: the embedded default), apply `--set` overrides and validate it."""
    where = str(path) if path is not None else "<default recipe>"
    raw = read_recipe_file(Path(path)) if path is not None else {}
    for override in overrides or []:
        apply_override(raw, override, where)
    return validate_recipe(raw, where)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping, with errors naming the file."""
    if not path.is_file():
        raise RecipeError("recipe file not found", where=str(path))
    try:
        data = parse_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise RecipeError(f"not valid YAML: {err}", where=str(path)) from None
    if not isinstance(data, dict):
        raise RecipeError("a recipe must be a mapping of keys", where=str(path))
    return data


def read_recipe_file(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Parse a YAML recipe and resolve its `extends:` chain into one mapping."""
    path = path.resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise RecipeError(f"extends: cycle ({chain})", where=str(path))
    data = read_yaml_mapping(path)
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if not isinstance(base_name, str):
        raise RecipeError("extends: must be a file path", where=str(path))
    base = read_recipe_file(path.parent / base_name, (*_seen, path))
    return deep_merge(base, data)


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else (lists included) in `top` replaces `base`."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# The two ways to give a run's length; a recipe gives one.
BUDGET_KEYS = {"max_steps", "total_samples"}


def apply_override(raw: dict[str, Any], override: str, where: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise RecipeError(f"--set {override!r}: expected dotted.key=value", where=where)
    try:
        value = parse_yaml(text)
    except yaml.YAMLError as err:
        raise RecipeError(f"--set {key}: value is not valid YAML: {err}", where=where) from None
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RecipeError(f"--set {key}: {part!r} is not a section", where=where)
        node = child
    node[parts[-1]] = value
    if parts[0] == "training" and len(parts) == 2 and parts[1] in BUDGET_KEYS and value is not None:
        # A budget given on the command line replaces the recipe's, in whichever unit it was given.
        for other in BUDGET_KEYS - {parts[1]}:
            node.pop(other, None)


def validate_recipe(raw: dict[str, Any], where: str) -> Recipe:
    """Build the typed recipe, turning the first schema error into a message naming the key."""
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as err:
        raise RecipeError(describe_validation_error(err), where=where) from None
    check_trl_sections(recipe, where)
    check_cross_fields(recipe, where)
    return recipe


def describe_validation_error(err: ValidationError, schema: type[BaseModel] | None = None) -> str:
    """One sentence for the first error: the dotted key, what is wrong, and a suggestion from `schema`."""
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    dotted = format_location(loc)
    if first["type"] == "extra_forbidden":
        suggestion = suggest_key(schema or Recipe, loc)
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        return f"{dotted}: unknown key{hint}"
    given = first.get("input")
    if first["type"].endswith("_type") or first["type"] in {"literal_error", "model_type"}:
        return f"{dotted}: {first['msg'].lower()}, got {given!r}"
    return f"{dotted}: {first['msg'].lower()}"


def format_location(loc: list[str]) -> str:
    """['rewards', '0', 'weight'] -> 'rewards[0].weight'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text


# Names users bring from other tools, for keys that difflib would not find.
KEY_SYNONYMS = {
    "rank": "r",
    "lora_r": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "lr": "learning_rate",
    "model_name_or_path": "policy",
    "batch_size": "per_device_batch_size",
    "per_device_train_batch_size": "per_device_batch_size",
    "max_completion_length": "max_new_tokens",
    "save_steps": "every",
}


def suggest_key(model: type[BaseModel], loc: list[str]) -> str | None:
    """The closest valid key to an unknown one, found by walking the schema to its section."""
    for part in loc[:-1]:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        inner = getattr(annotation, "__args__", (annotation,))
        sections = [t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)]
        if not sections:
            return None
        model = sections[0]
    synonym = KEY_SYNONYMS.get(loc[-1])
    if synonym in model.model_fields:
        return synonym
    matches = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    return matches[0] if matches else None


def training_argument_fields() -> frozenset[str]:
    """The fields of transformers' `TrainingArguments` that a config can take."""
    from transformers import TrainingArguments

    return frozenset(f.name for f in dataclasses.fields(TrainingArguments) if f.init)


def section_fields(algorithm: str) -> frozenset[str]:
    """The keys an algorithm's section takes: GRPOConfig's fields for `grpo:`; for `ppo:`, the PPO keys
    of our schema and the fields of `TrainingArguments`, less those refused."""
    if algorithm == "grpo":
        from trl import GRPOConfig

        return frozenset(f.name for f in dataclasses.fields(GRPOConfig) if f.init)
    return (frozenset(PPOSettings.model_fields) | training_argument_fields()) - PPO_REFUSED_KEYS.keys()


def check_trl_sections(recipe: Recipe, where: str) -> None:
    """`grpo:` keys must be fields of TRL's GRPOConfig, `ppo:` keys PPO keys of ours (`PPOSettings`) or
    `TrainingArguments` fields; neither may be a shared-section key."""
    for algorithm in ("grpo", "ppo"):
        section: dict[str, Any] = getattr(recipe, algorithm)
        if not section:
            continue
        fields = section_fields(algorithm)
        for key in section:
            if algorithm == "ppo" and key in PPO_REFUSED_KEYS:
                raise RecipeError(
                    f"ppo.{key}: not used by llm_rl's PPO: {PPO_REFUSED_KEYS[key]}", where=where
                )
            if key in SHARED_TRL_FIELDS:
                raise RecipeError(
                    f"{algorithm}.{key}: set by the shared section; use {SHARED_TRL_FIELDS[key]} instead",
                    where=where,
                )
            if key not in fields:
                if algorithm == "grpo":
                    raise RecipeError(
                        f"grpo.{key}: not a field of TRL's GRPOConfig{did_you_mean(key, sorted(fields))}",
                        where=where,
                    )
                # Suggest the PPO keys first: a misspelt PPO key is likelier than a TrainingArguments field.
                hint = did_you_mean(
                    key, [*PPOSettings.model_fields, *sorted(fields - PPOSettings.model_fields.keys())]
                )
                raise RecipeError(
                    f"ppo.{key}: not a PPO key (TRL's PPOConfig names, llm_rl's own, or TrainingArguments "
                    f"fields){hint}",
                    where=where,
                )
    if recipe.ppo:
        try:
            ppo_settings(recipe)
        except RecipeError as err:
            raise RecipeError(str(err), where=where) from None


def check_cross_fields(recipe: Recipe, where: str) -> None:
    """Settings that are valid alone but conflict together, each with the reason."""
    training = recipe.training
    if training.max_steps is not None and training.total_samples is not None:
        raise RecipeError(
            "training.max_steps and training.total_samples both set: give one budget, "
            "in updates or in samples",
            where=where,
        )
    generation = recipe.generation
    if generation.min_new_tokens is not None and generation.min_new_tokens > generation.max_new_tokens:
        raise RecipeError(
            f"generation.min_new_tokens ({generation.min_new_tokens}) is above "
            f"generation.max_new_tokens ({generation.max_new_tokens})",
            where=where,
        )
    if recipe.early_stopping.enabled and recipe.early_stopping.patience < 1:
        raise RecipeError("early_stopping.patience must be at least 1", where=where)
    every = recipe.evaluation.every
    if every is not None and every % training.logging_steps:
        raise RecipeError(
            f"evaluation.every ({every}) must be a multiple of training.logging_steps "
            f"({training.logging_steps}): eval metrics join the logged row of their update",
            where=where,
        )
    if recipe.early_stopping.metric.startswith("eval/") and every is None:
        raise RecipeError(
            f"early_stopping.metric {recipe.early_stopping.metric!r} is an eval metric, but "
            "evaluation.every is not set, so it is never measured",
            where=where,
        )
    resume = recipe.checkpointing.resume
    if resume not in ("auto", "never") and not Path(resume).exists():
        raise RecipeError(
            f"checkpointing.resume: {resume!r} is neither 'auto', 'never' nor an existing checkpoint",
            where=where,
        )
    if recipe.algorithm == "grpo":
        check_grpo_batches(recipe, where)
    check_advantages(recipe, where)
    check_schedules(recipe, where)
    if recipe.stages:
        stage_recipes(recipe, recipe.output_dir, where)
    names = [r.metric_name for r in recipe.rewards]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise RecipeError(
            f"rewards: {sorted(duplicates)[0]!r} appears twice; give one of them an alias",
            where=where,
        )


def check_grpo_batches(recipe: Recipe, where: str) -> None:
    """GRPO forms groups of num_generations completions; the generation batch must hold whole groups."""
    group = recipe.grpo.get("num_generations", 8)
    if not isinstance(group, int) or group < 2:
        raise RecipeError(
            "grpo.num_generations: must be an integer of at least 2 (advantages are relative to the group)",
            where=where,
        )
    training = recipe.training
    steps_per_generation = recipe.grpo.get("steps_per_generation") or training.gradient_accumulation_steps
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    generation_batch = recipe.grpo.get("generation_batch_size") or (
        training.per_device_batch_size * steps_per_generation * world_size
    )
    if generation_batch % group:
        raise RecipeError(
            f"grpo.num_generations: the generation batch of {generation_batch} completions "
            f"(training.per_device_batch_size x steps per generation x {world_size} processes) is not "
            f"a multiple of the group "
            f"size {group}; each prompt's {group} completions must be generated together",
            where=where,
        )


def check_advantages(recipe: Recipe, where: str) -> None:
    """`advantages:` against the algorithm, and against the TRL keys that say the same thing."""
    advantages = recipe.advantages
    if recipe.algorithm == "ppo" and advantages.normalize == "group":
        raise RecipeError(
            "advantages.normalize: 'group' needs GRPO's groups of completions per prompt; "
            "PPO samples one completion per prompt: use 'batch' or 'none'",
            where=where,
        )
    if advantages.normalize != "auto" and "scale_rewards" in recipe.grpo:
        raise RecipeError(
            "advantages.normalize and grpo.scale_rewards both set: they are the same setting; keep one",
            where=where,
        )
    if advantages.whiten_rewards and "whiten_rewards" in recipe.ppo:
        raise RecipeError(
            "advantages.whiten_rewards and ppo.whiten_rewards both set: they are the same setting; keep one",
            where=where,
        )


# Scalar settings the trainers read at every update, by algorithm: the keys `schedules:` accepts.
SCHEDULABLE = {
    "grpo": ("grpo.beta", "grpo.epsilon", "generation.temperature"),
    "ppo": (
        "ppo.cliprange",
        "ppo.cliprange_value",
        "ppo.kl_coef",
        "ppo.lam",
        "ppo.gamma",
        "ppo.vf_coef",
        "ppo.entropy_coef",
        "generation.temperature",
    ),
}


def active_schedules(recipe: Recipe) -> dict[str, Schedule]:
    """The schedules this recipe's algorithm reads; the other algorithm's keys wait for a swap, like its section."""
    return {key: value for key, value in recipe.schedules.items() if key in SCHEDULABLE[recipe.algorithm]}


def check_schedules(recipe: Recipe, where: str) -> None:
    """Each schedule names a setting a trainer reads every update, set in one place only."""
    every_key = {key for keys in SCHEDULABLE.values() for key in keys}
    for key, schedule in recipe.schedules.items():
        if key not in every_key:
            hint = did_you_mean(key, sorted(every_key))
            raise RecipeError(
                f"schedules.{key}: not a setting that can follow a schedule{hint}; "
                f"GRPO: {', '.join(SCHEDULABLE['grpo'])}; PPO: {', '.join(SCHEDULABLE['ppo'])}",
                where=where,
            )
        section, _, field = key.partition(".")
        if section in ("grpo", "ppo") and field in getattr(recipe, section):
            raise RecipeError(
                f"schedules.{key}: {key} is also set as a value; give it one or the other", where=where
            )
        if key == "grpo.beta" and recipe.algorithm == "grpo" and schedule.value_at(0) <= 0:
            raise RecipeError(
                "schedules.grpo.beta: must start above 0: GRPO builds its reference model only when "
                "beta is above 0 at the start",
                where=where,
            )
        if key == "generation.temperature" and recipe.grpo.get("use_vllm") and recipe.algorithm == "grpo":
            raise RecipeError(
                "schedules.generation.temperature: vLLM reads the temperature once at start-up; "
                "schedule it without grpo.use_vllm or keep it constant",
                where=where,
            )


# Keys a stage may not override: a stage continues the run's policy in the run's folder.
STAGE_FIXED_KEYS = {
    "run": "stages share the run's name, folder and seed",
    "model": "a stage continues the previous stage's policy; model settings are the recipe's",
    "stages": "stages do not nest",
    "extends": "extends belongs at the top of a recipe file",
}
STAGE_FIXED_DOTTED = {
    "training.max_steps": "give the stage's budget as its own max_steps or total_samples",
    "training.total_samples": "give the stage's budget as its own max_steps or total_samples",
    "checkpointing.resume": "a staged run resumes stage by stage by itself",
}


def stage_recipes(recipe: Recipe, run_folder: Path, where: str) -> list[Recipe]:
    """Every stage as a whole recipe (the recipe, its overrides, its budget, its folder), each validated."""
    names = [stage.name for stage in recipe.stages]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RecipeError(f"stages: the name {repeated[0]!r} is used twice", where=where)
    base = {key: value for key, value in recipe.to_dict().items() if key != "stages"}
    recipes = []
    for index, stage in enumerate(recipe.stages):
        label = f"stages[{index}] ({stage.name})"
        if (stage.max_steps is None) == (stage.total_samples is None):
            raise RecipeError(f"{label}: give one budget, max_steps or total_samples", where=where)
        for key, reason in STAGE_FIXED_KEYS.items():
            if key in stage.overrides:
                raise RecipeError(f"{label}.overrides.{key}: cannot change in a stage: {reason}", where=where)
        for dotted, reason in STAGE_FIXED_DOTTED.items():
            section, _, field = dotted.partition(".")
            if field in (stage.overrides.get(section) or {}):
                raise RecipeError(f"{label}.overrides.{dotted}: {reason}", where=where)
        raw = deep_merge(base, stage.overrides)
        raw["training"].update(max_steps=stage.max_steps, total_samples=stage.total_samples)
        raw["run"]["output_dir"] = str(stage_folder(run_folder, index, stage.name))
        raw["checkpointing"]["resume"] = "auto"
        recipes.append(validate_recipe(raw, f"{where}: {label}"))
    return recipes

"""The recipe schema: one typed, strict set of sections shared by every algorithm, and `Recipe`.

The ground floor of the library: it imports no algorithm. The shared sections are in our own words;
each algorithm's own section (`grpo:`, `ppo:`, ...) holds its trainer's field names, checked by the
algorithm (`llm_rl.algorithms`). Reading YAML into a `Recipe` is `llm_rl.recipe.load.load`.
"""

from __future__ import annotations

import math
from pathlib import Path
from string import Formatter
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

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

    # The prompt's text, with `{a}` and `{b}` for the operands: the default suits the embedded model,
    # whose tokenizer knows only digits and signs; a chat model wants words, e.g.
    # "What is {a} + {b}? Reply with the number only."
    template: str = "{a}+{b}="

    # Operands are drawn uniformly from min_operand..max_operand (inclusive; min_operand <= max_operand).
    # Single digits by default: two-digit sums do not learn on a CPU (DESIGN.md).
    min_operand: int = Field(0, ge=0, le=99)
    # The largest operand; the embedded tiny model is warmed up on 0..9.
    max_operand: int = Field(9, ge=1, le=99)
    # Rows of the train split (drawn with replacement, seeded by run.seed).
    num_train: int = Field(2000, gt=0)
    # Rows of the eval split, drawn with another seed; 0: no eval split.
    num_eval: int = Field(200, ge=0)

    @field_validator("template")
    @classmethod
    def names_both_operands(cls, template: str) -> str:
        """Only `{a}` and `{b}`, each at least once: no attribute access or format spec reaches str.format."""
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in Formatter().parse(template)
            if name is not None
        ]
        bad = [name for name, spec, conversion in fields if name not in ("a", "b") or spec or conversion]
        if bad:
            raise ValueError(
                f"only {{a}} and {{b}} may be in braces, not {{{bad[0]}}} (write {{{{ for a brace)"
            )
        missing = {"a", "b"} - {name for name, _, _ in fields}
        if missing:
            raise ValueError(f"the template has no {{{min(missing)}}}: it must show both operands")
        return template


class DataSourceEntry(Section):
    """One dataset of a mixture (`data.sources`), as TRL's `datasets:` list names one."""

    # Read as `data.source` is: a local file or folder, a hub id, or "builtin:<task>".
    source: str
    split: str = "train"
    # A hub dataset's configuration (the `name` of `datasets.load_dataset`).
    config: str | None = None
    # Columns kept from this dataset before the mixture is joined; None keeps all.
    columns: list[str] | None = None
    # This dataset's share of the mixture (TRL's `fraction`), normalised over the sources and capped so
    # that no dataset is repeated; set it on every source or on none. None: every row of every source.
    weight: float | None = Field(None, gt=0)


class DataSection(Section):
    # A local jsonl/json/parquet/csv file, a save_to_disk folder, a hub id, or "builtin:<task>".
    source: str = "builtin:arithmetic"
    # A split name, or part of one in `datasets`' slicing syntax ("train[:-100]", "train[:10%]").
    split: str = "train"
    # A hub dataset's configuration (the `name` of `datasets.load_dataset`).
    config: str | None = None
    # Several datasets joined into one train set, instead of source/split/config (TRL's `datasets:`).
    sources: list[DataSourceEntry] | None = None
    # A split of the same source for held-out prompts: none by default for files and folders, the task's
    # own "eval" split by default for builtin tasks.
    eval_split: str | None = None
    # Held-out prompts taken from the train set instead (seeded by run.seed): a fraction below 1 or a
    # number of rows (TRL's `test_split_size`).
    eval_size: float | int | None = Field(None, gt=0)
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

    @property
    def names(self) -> list[str]:
        """The sources read: `source`, or each of `sources`."""
        return [entry.source for entry in self.sources] if self.sources else [self.source]

    @property
    def label(self) -> str:
        """The data as errors and logs name it: the source, or the mixture's sources joined by '+'."""
        return " + ".join(self.names)


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


class VLLMSection(Section):
    """vLLM as the rollout engine (`generation.backend: vllm`, `llm_rl.generation.vllm_engine`).

    The keys are TRL's `vllm_*` settings under shorter names, with TRL's meaning and defaults, plus what
    an engine llm_rl builds itself needs (its precision, compilation and KV cache size).
    """

    # "colocate": an engine inside every training process, sharing its device (GRPO, RLOO and PPO);
    # "server": generation on a separate `trl vllm-serve` process (GRPO and RLOO; TRL sends it the weights
    # over NCCL, so it needs CUDA GPUs). TRL: vllm_mode.
    mode: Literal["colocate", "server"] = "colocate"
    # Share of the device's memory a colocated engine takes for its weights, activations and KV cache (on
    # the CPU build: of the host's memory). TRL: vllm_gpu_memory_utilization.
    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    # Devices one colocated engine spans; must divide the number of processes. TRL: vllm_tensor_parallel_size.
    tensor_parallel_size: int = Field(1, gt=0)
    # Release the engine's weights and KV cache while the trainer steps, and reload them before each
    # generation (less memory, more time). CUDA only. TRL: vllm_enable_sleep_mode.
    sleep_mode: bool = False
    # Weigh the loss by the trainer's over the engine's probability of each sampled token, so that the two
    # engines' numerical differences do not bias the update (GRPO only; null: TRL's default, on). TRL:
    # vllm_importance_sampling_correction; its mode and clip bounds stay grpo.vllm_importance_sampling_*.
    importance_sampling: bool | None = None
    # The longest prompt + completion the engine holds; null: the model's own limit. TRL: vllm_max_model_length.
    max_model_length: int | None = Field(None, gt=0)
    # The engine's precision; "auto": the training precision's (float32 on CPU, bfloat16 on a bf16 GPU),
    # so that the engine samples the policy being trained. (vLLM alone would turn float32 into bfloat16.)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # Run the engine without torch.compile and CUDA graphs; null: eager on CPU (compiling there costs about
    # 30 s a process and gains little), compiled on a GPU.
    enforce_eager: bool | None = None
    # The KV cache's size in GiB, instead of what gpu_memory_utilization leaves for it; null: that share.
    kv_cache_gb: float | None = Field(None, gt=0.0)
    # Server mode: where `trl vllm-serve` listens (a base URL replaces host and port), how long to wait for
    # it, and the port of the weight-update group. TRL: vllm_server_base_url, vllm_server_host,
    # vllm_server_port, vllm_server_timeout, vllm_group_port.
    server_base_url: str | None = None
    server_host: str = "0.0.0.0"
    server_port: int = Field(8000, ge=1, le=65535)
    server_timeout: float = Field(240.0, gt=0.0)
    group_port: int = Field(51216, ge=1, le=65535)


class GenerationSection(Section):
    max_new_tokens: int = Field(256, gt=0)
    # EOS is held back until a completion has this many tokens (benchmarks, or against empty answers).
    min_new_tokens: int | None = Field(None, gt=0)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    # How completions are generated, for every algorithm (`llm_rl.generation.backends`): "hf"
    # transformers' generate with a dynamic cache; "static" a static KV cache with transformers' compiled
    # generation; "paged" transformers' continuous batching; "vllm" a vLLM engine (settings in `vllm:`);
    # "auto" the fastest that this host runs (measured: hf on CPU).
    backend: Literal["auto", "hf", "static", "paged", "vllm"] = "auto"
    vllm: VLLMSection = Field(default_factory=VLLMSection)
    # Sequences generated at once on one device (the rollout batch), apart from the training micro-batch
    # (training.per_device_batch_size); None: each algorithm's own (GRPO and RLOO: one update's
    # completions; PPO: ppo.local_rollout_forward_batch_size).
    batch_size: int | None = Field(None, gt=0)


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


def yaml_off(value: Any) -> Any:
    """YAML 1.1 reads a bare `off` as false: `action: off` means the action "off"."""
    return "off" if value is False else value


AlertAction = Annotated[Literal["warn", "stop", "off"], BeforeValidator(yaml_off)]


class BoundAlert(Section):
    """Fires when a metric goes above `above`; an alert that is off needs no bound."""

    above: float | None = Field(None, gt=0.0)
    # warn: log it and go on; stop: save the last good state and end with status stopped_by_alert.
    action: AlertAction = "warn"

    @model_validator(mode="after")
    def _a_bound_when_on(self) -> BoundAlert:
        if self.above is None and self.action != "off":
            raise ValueError(f"give the bound `above` for action {self.action!r}, or set action: off")
        return self


class CollapseAlert(Section):
    """Fires when every sample got the same reward (`reward/std` 0) for `rows` rows in a row."""

    rows: int = Field(20, gt=0)
    action: AlertAction = "warn"


class NonFiniteAlert(Section):
    """Fires on NaN or inf in a loss, the reward or the gradient norm."""

    action: AlertAction = "stop"


class CountAlert(Section):
    """Fires when a count goes above `above` (0: on the first one)."""

    above: int = Field(0, ge=0)
    action: AlertAction = "warn"


class AlertsSection(Section):
    grad_norm: BoundAlert = Field(default_factory=lambda: BoundAlert(above=100.0))
    kl: BoundAlert = Field(default_factory=lambda: BoundAlert(above=10.0))
    value_loss: BoundAlert = Field(default_factory=lambda: BoundAlert(above=100.0))
    # GPU health through NVML (gpu/temperature_c, gpu/ecc_errors); no readings, no alert, on a host
    # without NVML. Datacenter GPUs throttle their clocks near 85-90 C.
    gpu_temperature: BoundAlert = Field(default_factory=lambda: BoundAlert(above=85.0))
    # Uncorrected memory errors since the driver loaded: results computed on that GPU may be wrong.
    ecc_errors: CountAlert = Field(default_factory=CountAlert)
    reward_collapse: CollapseAlert = Field(default_factory=CollapseAlert)
    nonfinite: NonFiniteAlert = Field(default_factory=NonFiniteAlert)


class EvaluationSection(Section):
    """Reward on the data's eval split (`llm_rl.training.evaluation`)."""

    # Evaluate every this many updates (a multiple of training.logging_steps); null: never.
    every: int | None = Field(None, gt=0)
    # Also evaluate the starting policy before the first update (a row at step 0, like transformers'
    # `eval_on_start`): the baseline the run is measured against. Not repeated when a run resumes.
    at_start: bool = False
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
    """A whole recipe: the shared sections, and one section per algorithm under the algorithm's name.

    The schema names no algorithm. `algorithm` and the algorithm sections (`grpo:`, `ppo:`, ...: any
    further top-level key, a mapping of the trainer's own field names) are checked by
    `llm_rl.recipe.load` against the algorithms `llm_rl.algorithms.registry` lists.
    """

    model_config = ConfigDict(extra="allow", strict=True, validate_assignment=True)

    algorithm: str = "grpo"
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
    # Scalar settings that change over the run, by dotted key (an algorithm's SCHEDULABLE), in samples
    # since the start.
    schedules: dict[str, Schedule] = Field(default_factory=dict)
    # Stages run one after another in one run folder, each warm-started from the one before.
    stages: list[StageEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _algorithm_sections_are_mappings(self) -> Recipe:
        for name, value in (self.model_extra or {}).items():
            if not isinstance(value, dict):
                raise ValueError(f"{name}: an algorithm's section must be a mapping of its keys")
        return self

    def section(self, algorithm: str) -> dict[str, Any]:
        """The recipe's section for `algorithm` (its trainer's keys); empty when the recipe has none."""
        return (self.model_extra or {}).get(algorithm) or {}

    def with_section(self, algorithm: str, section: dict[str, Any]) -> None:
        """Replace the section of `algorithm`."""
        setattr(self, algorithm, section)

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
        task = Path(self.data.names[0].split(":", 1)[-1].rstrip("/")).stem
        return f"{self.algorithm}-{task}"


# Fields of TRL's configs that the shared sections own: setting them in an algorithm's section would make two
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
    # TRL's vLLM settings: `use_vllm` is generation.backend: vllm, the others live in generation.vllm.
    "use_vllm": "generation.backend",
    "vllm_mode": "generation.vllm.mode",
    "vllm_gpu_memory_utilization": "generation.vllm.gpu_memory_utilization",
    "vllm_tensor_parallel_size": "generation.vllm.tensor_parallel_size",
    "vllm_enable_sleep_mode": "generation.vllm.sleep_mode",
    "vllm_max_model_length": "generation.vllm.max_model_length",
    "vllm_importance_sampling_correction": "generation.vllm.importance_sampling",
    "vllm_server_base_url": "generation.vllm.server_base_url",
    "vllm_server_host": "generation.vllm.server_host",
    "vllm_server_port": "generation.vllm.server_port",
    "vllm_server_timeout": "generation.vllm.server_timeout",
    "vllm_group_port": "generation.vllm.group_port",
}

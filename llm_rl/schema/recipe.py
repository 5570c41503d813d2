"""`Recipe`: the shared sections, one section per algorithm under its name, schedules and stages; and the
trainer fields the shared sections own.

The ground floor of the library: it imports no algorithm. The rules between sections are validators
here; the rules that need the algorithms (their keys, schedulable settings, batch arithmetic) are
`llm_rl.recipe.load`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from llm_rl.schema.data import DataSection
from llm_rl.schema.monitoring import MonitoringSection
from llm_rl.schema.schedules import Schedule
from llm_rl.schema.section import RuleBroken, Section
from llm_rl.schema.sections import (
    AdvantagesSection,
    CheckpointingSection,
    EarlyStoppingSection,
    EvaluationSection,
    GenerationSection,
    ModelSection,
    RewardEntry,
    RunSection,
    TrainingSection,
)


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
    # Each stage as a whole recipe, built and validated once, when the recipe is loaded
    # (`llm_rl.recipe.stages`); not a key of the recipe.
    _stage_recipes: list[Recipe] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _algorithm_sections_are_mappings(self) -> Recipe:
        for name, value in (self.model_extra or {}).items():
            if not isinstance(value, dict):
                raise ValueError(f"{name}: an algorithm's section must be a mapping of its keys")
        return self

    @model_validator(mode="after")
    def _evaluation_on_logged_updates(self) -> Recipe:
        """Eval metrics join the logged row of their update, so they come on logged updates."""
        every = self.evaluation.every
        if every is not None and every % self.training.logging_steps:
            raise RuleBroken(
                f"evaluation.every ({every}) must be a multiple of training.logging_steps "
                f"({self.training.logging_steps}): eval metrics join the logged row of their update"
            )
        return self

    @model_validator(mode="after")
    def _early_stopping_on_a_measured_metric(self) -> Recipe:
        """Stopping on an eval metric needs evaluation to run."""
        metric = self.early_stopping.metric
        if self.early_stopping.enabled and metric.startswith("eval/") and self.evaluation.every is None:
            raise RuleBroken(
                f"early_stopping.metric {metric!r} is an eval metric, but evaluation.every is not set, "
                "so it is never measured"
            )
        return self

    @model_validator(mode="after")
    def _one_metric_per_reward(self) -> Recipe:
        """Each reward function logs under a name of its own."""
        names = [reward.metric_name for reward in self.rewards]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise RuleBroken(f"rewards: {repeated[0]!r} appears twice; give one of them an alias")
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

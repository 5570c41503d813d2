"""What every algorithm is given (`Components`) and what it must answer (`Algorithm`).

A run resolves its recipe into components (tokenizer, policy, prompts, rewards) before any algorithm
is involved; the algorithm then turns them into a trainer. Everything else in the library that
depends on the algorithm (recipe checks, `llm-rl plan`, `doctor`, `migrate`, staged runs) asks the
algorithm through the protocol below, never by comparing its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from llm_rl.data.prompts import PromptData, load_prompt_data
from llm_rl.models.load import load_policy, load_tokenizer, resolve_model_path, training_tokenizer
from llm_rl.rewards import RewardSet, build_reward_functions
from llm_rl.schema import Recipe
from llm_rl.training.args import SampleCounter
from llm_rl.training.evaluation import HeldOutReward

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback

# (step, value) pairs of one metric over a run, as `llm-rl doctor` reads them.
Series = Callable[[str], list[tuple[int, float]]]


@dataclass
class Components:
    """Everything a trainer builder needs; built once by `build_components`."""

    recipe: Recipe
    # The run's tokenizer (left padding, a pad token: `llm_rl.models.load.training_tokenizer`).
    tokenizer: PreTrainedTokenizerBase
    policy: PreTrainedModel
    data: PromptData
    rewards: RewardSet
    # The folder the policy was loaded from (TRL reloads reference models from it).
    policy_path: str
    # Reward on the eval split every `evaluation.every` updates (llm_rl.training.evaluation), when asked for.
    held_out: HeldOutReward | None = None
    # What the algorithm's `prepare` loaded for its trainer (PPO: `PPOInputs`); None before it ran.
    prepared: object | None = None
    # The tokenizer as the user gave it: what `final/` and checkpoints save. None: `tokenizer`.
    saved_tokenizer: PreTrainedTokenizerBase | None = None


def build_components(recipe: Recipe) -> Components:
    """Load everything the recipe names; every error here is the user's to fix (exit code 2)."""
    saved_tokenizer = load_tokenizer(recipe.model)
    tokenizer = training_tokenizer(saved_tokenizer)
    data = load_prompt_data(recipe.data, tokenizer, recipe.run.seed)
    rewards = build_reward_functions(recipe.rewards)
    policy_path = resolve_model_path(recipe.model.policy)
    policy = load_policy(recipe.model, recipe.training.precision)
    return Components(recipe, tokenizer, policy, data, rewards, policy_path, saved_tokenizer=saved_tokenizer)


class Counterpart(NamedTuple):
    """An algorithm's own key for a setting every algorithm has in some form (`llm-rl migrate`)."""

    key: str
    # The trainer's default, carried into a migrated recipe (with a row saying so) when the source recipe
    # leaves the key out; None: not carried.
    default: Any
    # What the key does in this algorithm, for the migration table.
    meaning: str


class Idea(StrEnum):
    """What an algorithm's own section key sets, in words every algorithm shares: `llm-rl migrate`
    matches a source key to the target's key for the same idea, or to the target's reason for having
    none (`Algorithm.KEY_IDEAS`, `Algorithm.lacking`)."""

    CRITIC = "a critic"
    VALUE_LOSS = "a value loss"
    GAE = "GAE"
    ESTIMATOR = "a choice of advantage estimator"
    ADVANTAGE_SCALING = "advantage scaling"
    MINI_BATCHES = "mini-batches of a generation"
    GENERATION_BATCH = "a generation batch of its own size"
    TRUNCATED_COMPLETIONS = "truncated completions"
    UNSCORED_COMPLETIONS = "completions no reward scored"
    GROUPS = "groups of completions per prompt"
    HELD_OUT_GROUPS = "groups on held-out prompts"
    LOSS_AGGREGATION = "a choice of loss aggregation"
    ASYMMETRIC_CLIP = "an asymmetric ratio clip"
    TWO_SIDED_CLIP = "two-sided ratio clipping"
    SEQUENCE_RATIO = "a sequence-level ratio"
    ENTROPY_MASK = "entropy masking"
    REFERENCE_SYNC = "a reference model that follows the policy"
    ROUTER_LOSS = "a Mixture-of-Experts load-balancing loss"
    ENGINE_CORRECTION = "a correction for the engine's sampling probabilities"
    ENGINE_MODEL = "a choice of the engine's model implementation"
    STRUCTURED_OUTPUTS = "structured outputs"
    HUB_PUSH = "pushing to a hub"


class SharedOverride(NamedTuple):
    """A shared setting (a dotted key) that an algorithm cannot run as another's recipe may set it
    (`llm-rl migrate`)."""

    # The value it runs instead; None: the key is left out of the migrated recipe.
    value: Any
    # Why, for the migration table.
    why: str


class Algorithm(Protocol):
    """What an algorithm module provides; `llm_rl.algorithms.registry` lists the modules.

    An algorithm is a module: the constants below are its module-level names, the methods its
    functions (without `self`).

    Every function that can reject a recipe raises `llm_rl.errors.RecipeError` naming the dotted key.
    """

    # The recipe's `algorithm:` value, and the key of its own section.
    NAME: str
    # The trainer's log names -> the unified names of metrics.jsonl (DESIGN.md).
    METRIC_NAMES: Mapping[str, str]
    # The dotted keys `schedules:` may set for it (its trainer reads them every update).
    SCHEDULABLE: tuple[str, ...]
    # Of those, the ones whose schedule must start above 0, each with why (its trainer decides something
    # at start-up from the value there: GRPO builds a reference model only for a KL weight above 0).
    STARTS_ABOVE_ZERO: Mapping[str, str]
    # The dotted key that weighs the KL to the reference model (doctor's advice names it).
    KL_COEFFICIENT: str
    # Settings every algorithm has, by a shared name ("kl_coefficient", "clip_range", "epochs"), for migrate.
    COUNTERPARTS: Mapping[str, Counterpart]
    # Shared settings (dotted keys) a recipe migrated to it cannot keep as they are, for migrate
    # (PPO: generation.vllm.mode: server).
    SHARED_OVERRIDES: Mapping[str, SharedOverride]
    # Its own section's keys that set an idea other algorithms set another way or not at all, for migrate
    # (PPO: whiten_rewards -> advantage scaling, which GRPO sets with scale_rewards).
    KEY_IDEAS: Mapping[str, Idea]

    # --- the recipe (`llm_rl.recipe.load`) ---
    def section_fields(self) -> frozenset[str]:
        """The keys its section takes."""

    def check_section(self, section: dict[str, Any], recipe: Recipe) -> None:
        """Its section's keys and values; called whenever the recipe has the section, active or not."""

    def check_recipe(self, recipe: Recipe) -> None:
        """The whole recipe as this algorithm will run it (batch arithmetic, advantages, schedules)."""

    # --- a run (`llm_rl.run`) ---
    def samples_per_step(self, recipe: Recipe) -> int:
        """Prompt-completion pairs per optimizer update, over all processes."""

    def count_samples(self, recipe: Recipe) -> SampleCounter:
        """Samples so far from the trainer state: the x-axis of metrics and checkpoint names."""

    def trainer_config(self, recipe: Recipe) -> Any:
        """The trainer's config (`TrainingArguments` or a subclass); raises on settings it rejects."""

    def prepare(self, components: Components) -> None:
        """Load and check what the trainer needs beyond the components (into `components.prepared`),
        before the run folder is touched."""

    def build_trainer(self, components: Components, callbacks: list[TrainerCallback]) -> Trainer:
        """A ready-to-train trainer with llm_rl's callbacks."""

    def apply_setting(self, trainer: Trainer, key: str, value: float) -> None:
        """Set a scheduled setting (one of SCHEDULABLE) where the trainer reads it each update."""

    def finish_from_checkpoint(self, trainer: Trainer, checkpoint: Path) -> None:
        """Leave the trainer as a checkpoint at the run's budget left it, taking no update: the run was
        stopped after its last checkpoint, before its final model was saved."""

    def hand_over(self, stage: Recipe, previous_final: Path, overrides: dict[str, Any]) -> None:
        """Start a stage from the previous stage's `final/` beyond its policy (PPO: its critic)."""

    # --- `llm-rl plan` ---
    def critic_path(self, recipe: Recipe, policy_path: str) -> str | None:
        """The folder the critic loads from; None for an algorithm without one."""

    def needs_reference(self, recipe: Recipe) -> bool:
        """Whether the run holds a frozen reference copy of the policy."""

    def generation_batch(self, recipe: Recipe) -> int:
        """Sequences generated at once on one GPU."""

    # --- `llm-rl doctor` ---
    def flat_reward_hint(self, series: Series) -> tuple[str, str] | None:
        """When reward stays flat: what the run's own metrics show, and what to change; None: no hint."""

    # --- `llm-rl compare` ---
    def variant(self, recipe: dict[str, Any]) -> str | None:
        """What sets a run apart from others of the algorithm, from its resolved recipe (PPO: a critic-free
        advantage estimator), for compare's labels; None: nothing."""

    # --- `llm-rl migrate` ---
    def lacking(self, recipe: dict[str, Any]) -> Mapping[Idea, str]:
        """The ideas it has no setting for as `recipe` (the migrated recipe, its target section as
        chosen so far) would run it, and why (GRPO: a critic)."""

    def complete_migration(
        self, recipe: dict[str, Any], section: dict[str, Any]
    ) -> list[tuple[str, Any, str]]:
        """Settings a recipe migrated to this algorithm needs and its source lacked, added to `section`:
        (key, value, note) for each."""

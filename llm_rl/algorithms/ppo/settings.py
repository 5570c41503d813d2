"""The `ppo:` recipe section: TRL's former PPOConfig keys under their names and defaults, plus ours."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llm_rl.algorithms.ppo.estimators import Estimator, find_estimator
from llm_rl.errors import RecipeError
from llm_rl.schema import Recipe
from llm_rl.training.args import world_size

# The recipe section PPO reads (the algorithm's name).
SECTION = "ppo"
# Completions per prompt for a group estimator when ppo.num_generations is not set (TRL's GRPO default).
GROUP_DEFAULT = 8
# The `ppo:` keys that configure the critic: refused with an estimator that trains none.
CRITIC_KEYS = ("value_model", "critic_learning_rate", "critic_warmup_steps", "vf_coef", "cliprange_value")


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
    # How advantages are estimated (`llm_rl.algorithms.ppo.estimators`): gae (with a critic), or the
    # critic-free reinforce_pp, reinforce_pp_baseline, group and leave_one_out. TRL's, OpenRLHF's and
    # verl's spellings (rloo, grpo, reinforce_baseline, ...) are read as these names.
    advantage_estimator: str = "gae"
    # Completions sampled per prompt, in consecutive rows of a rollout; None: 1, or GROUP_DEFAULT for an
    # estimator whose baseline is the group (TRL's GRPOConfig key).
    num_generations: int | None = Field(None, ge=1)
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

    @field_validator("advantage_estimator")
    @classmethod
    def known_estimator(cls, name: str) -> str:
        """A registered estimator; a synonym is stored under its own name."""
        return find_estimator(name).name

    @property
    def estimator(self) -> Estimator:
        return find_estimator(self.advantage_estimator)

    @property
    def needs_critic(self) -> bool:
        """Whether a value model is trained beside the policy (GAE only)."""
        return self.estimator.needs_critic

    @property
    def warmup_updates(self) -> int:
        """Updates at the start in which only the critic learns: `critic_warmup_steps`, and none without a
        critic (the key is then unused, not a frozen policy)."""
        return self.critic_warmup_steps if self.needs_critic else 0

    @property
    def group_size(self) -> int:
        """Completions per prompt in a rollout."""
        if self.num_generations is not None:
            return self.num_generations
        return GROUP_DEFAULT if self.estimator.needs_groups else 1

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
        return PPOSettings.model_validate(recipe.section(SECTION))
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise RecipeError(f"ppo.{key}: {first['msg'].lower()}") from None


# --- batch arithmetic ---


def rollout_batch(recipe: Recipe) -> int:
    """Completions per update and process: `training.per_device_batch_size x gradient_accumulation_steps`."""
    return recipe.training.per_device_batch_size * recipe.training.gradient_accumulation_steps


def prompts_per_update(recipe: Recipe) -> int:
    """Prompts per update and process: the rollout batch over `ppo.num_generations`."""
    return rollout_batch(recipe) // ppo_settings(recipe).group_size


def samples_per_step(recipe: Recipe) -> int:
    """Episodes (prompt-completion pairs) per PPO update over all processes."""
    return rollout_batch(recipe) * world_size()

"""The shared sections every algorithm reads, in our own words: the run, the model, the reward functions,
generation, training, checkpointing, early stopping, evaluation and advantages.

A rule between keys of one section is a validator on that section; rules across sections are on
`Recipe` (`llm_rl.schema.recipe`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llm_rl.schema.section import RuleBroken, Section


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

    @model_validator(mode="after")
    def _min_within_max(self) -> GenerationSection:
        """A completion cannot be held to more tokens than it may have."""
        if self.min_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise RuleBroken(
                f"generation.min_new_tokens ({self.min_new_tokens}) is above "
                f"generation.max_new_tokens ({self.max_new_tokens})"
            )
        return self


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

    @model_validator(mode="after")
    def _one_budget(self) -> TrainingSection:
        """The run ends by one budget, counted in updates or in samples."""
        if self.max_steps is not None and self.total_samples is not None:
            raise RuleBroken(
                "training.max_steps and training.total_samples both set: give one budget, "
                "in updates or in samples"
            )
        return self


class CheckpointingSection(Section):
    every: int = Field(100_000, gt=0)
    unit: Literal["samples", "steps"] = "samples"
    keep_last: int | None = Field(2, gt=0)
    # "auto": continue from the latest complete checkpoint in output_dir; "never"; or a path.
    resume: str = "auto"

    @model_validator(mode="after")
    def _resume_from_what_exists(self) -> CheckpointingSection:
        """A checkpoint to resume from is one that is there now, not one found missing hours later."""
        if self.resume not in ("auto", "never") and not Path(self.resume).exists():
            raise RuleBroken(
                f"checkpointing.resume: {self.resume!r} is neither 'auto', 'never' nor an existing checkpoint"
            )
        return self


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

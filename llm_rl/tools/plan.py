"""`llm-rl plan`: per-GPU memory of a recipe under DDP and each ZeRO stage, from model configs alone.

The models are built on PyTorch's meta device (no weights are read or allocated) to count their
parameters exactly. Memory then follows the ZeRO paper's accounting for mixed-precision Adam, per
trainable parameter: 2 bytes of bf16 weights, 2 of gradients, 12 of fp32 master weights and Adam's
two moments. Frozen models (PPO's reference, a reward model, GRPO's reference when `beta > 0`) hold
2 bytes a parameter. Activations use Korthikanti et al. (2022): 34 bytes per token and hidden unit for
each layer with fused attention, only the layer inputs kept under gradient checkpointing, plus fp32
logits over the vocabulary. Generation holds the KV cache and, under ZeRO-3, the gathered policy
weights. A colocated vLLM engine (`generation.backend: vllm`) holds its share of every GPU
(`generation.vllm.gpu_memory_utilization`) beside training, or only while it generates with
`generation.vllm.sleep_mode`, and no transformers KV cache is made. The result is an estimate to choose a
configuration by, not a guarantee: fragmentation, kernels' workspaces and the CUDA context are covered by
a fixed allowance and 10% headroom.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.errors import ModelError, first_line
from llm_rl.models.load import resolve_model_path
from llm_rl.schema import Recipe

GB = 1024**3
# Bytes per trainable parameter: bf16 weights, bf16 gradients, fp32 master copy + Adam's m and v.
WEIGHT_BYTES, GRADIENT_BYTES, OPTIMIZER_BYTES = 2, 2, 12
# Bytes of activations per token, hidden unit and layer in bf16 with fused attention (Korthikanti et al.).
ACTIVATION_BYTES = 34
# Bytes of the layer input kept per token and hidden unit for each layer under gradient checkpointing.
CHECKPOINT_BYTES = 2
# fp32 logits over the vocabulary for the log-probabilities.
LOGIT_BYTES = 4
# CUDA context, NCCL buffers and kernel workspaces, per GPU.
FIXED_ALLOWANCE = 2 * GB
# A configuration fits when its estimate is at most this share of the GPU's memory.
HEADROOM = 0.9
# Prompt length assumed when the recipe sets no data.max_prompt_length.
DEFAULT_PROMPT_TOKENS = 256


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs from a model's config."""

    name: str
    parameters: int
    hidden: int
    layers: int
    kv_width: int  # key/value heads x head dimension
    vocab: int


@dataclass(frozen=True)
class Strategy:
    """A way to spread a run over GPUs, and the accelerate config that sets it up."""

    name: str
    config: str
    zero_stage: int  # 0: DDP (or one GPU)
    offload: bool = False


ONE_GPU = Strategy("one GPU", "accelerate_configs/single_gpu.yaml", 0)
STRATEGIES = (
    Strategy("DDP", "accelerate_configs/multi_gpu.yaml", 0),
    Strategy("ZeRO-2", "accelerate_configs/deepspeed_zero2.yaml", 2),
    Strategy("ZeRO-3", "accelerate_configs/deepspeed_zero3.yaml", 3),
    Strategy("ZeRO-3 + CPU offload", "accelerate_configs/deepspeed_zero3_offload.yaml", 3, offload=True),
)


@dataclass(frozen=True)
class Estimate:
    """Per-GPU bytes of one strategy, by what holds them."""

    strategy: Strategy
    trainable: int
    frozen: int
    activations: int
    generation: int
    # A colocated vLLM engine's memory, held all along beside training (without sleep mode).
    engine: int = 0

    @property
    def total(self) -> int:
        resident = self.trainable + self.frozen + self.engine
        return resident + max(self.activations, self.generation) + FIXED_ALLOWANCE


@dataclass(frozen=True)
class Plan:
    """A recipe's models and the estimate under each strategy."""

    algorithm: str
    gpus: int
    gpu_memory: float  # GB
    trainable: list[ModelShape]
    frozen: list[ModelShape]
    estimates: list[Estimate]

    def fits(self, estimate: Estimate) -> bool:
        return estimate.total <= HEADROOM * self.gpu_memory * GB

    @property
    def recommended(self) -> Estimate | None:
        """The first strategy that fits, in order of speed (DDP is fastest, offload slowest)."""
        return next((e for e in self.estimates if self.fits(e)), None)


def model_shape(name: str, path: str, causal_lm: bool, trust_remote_code: bool) -> ModelShape:
    """Count a model's parameters on the meta device: its config is read, its weights never are."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as err:
        raise ModelError(f"config does not load: {first_line(err)}", where=path) from None
    if not causal_lm:
        config.num_labels = 1
    auto = AutoModelForCausalLM if causal_lm else AutoModelForSequenceClassification
    with init_empty_weights():
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    model.tie_weights()  # from_config on the meta device leaves tied embeddings as two tensors
    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return ModelShape(
        name=name,
        parameters=sum(p.numel() for p in model.parameters()),
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        kv_width=kv_heads * head_dim,
        vocab=text.vocab_size,
    )


def recipe_models(recipe: Recipe) -> tuple[list[ModelShape], list[ModelShape]]:
    """(trainable, frozen) models the recipe's run holds on each GPU.

    With LoRA the policy's base is frozen (the adapter's own states are well under 1% of it) and is
    also the reference model; PPO's critic is a whole trainable model either way.
    """
    remote = recipe.model.trust_remote_code
    lora = recipe.model.lora.enabled
    policy_path = resolve_model_path(recipe.model.policy)
    policy = model_shape("policy", policy_path, causal_lm=True, trust_remote_code=remote)
    trainable, frozen = ([], [renamed(policy, "policy (LoRA base)")]) if lora else ([policy], [])
    algorithm = ALGORITHMS[recipe.algorithm]
    critic_path = algorithm.critic_path(recipe, policy_path)
    if critic_path is not None:
        trainable.append(model_shape("critic", critic_path, causal_lm=False, trust_remote_code=remote))
    if algorithm.needs_reference(recipe) and not lora:
        frozen.append(renamed(policy, "reference"))
    for index, reward in enumerate(recipe.rewards):
        if reward.name == "reward_model":
            path = resolve_model_path(str(reward.kwargs["path"]), key=f"rewards[{index}].path")
            frozen.append(model_shape("reward model", path, causal_lm=False, trust_remote_code=remote))
    return trainable, frozen


def renamed(model: ModelShape, name: str) -> ModelShape:
    """The same shape under another role."""
    return dataclasses.replace(model, name=name)


def sequence_tokens(recipe: Recipe) -> int:
    """Prompt plus completion tokens of the longest sample."""
    return (recipe.data.max_prompt_length or DEFAULT_PROMPT_TOKENS) + recipe.generation.max_new_tokens


def trainable_bytes(parameters: int, gpus: int, strategy: Strategy) -> int:
    """Weights, gradients and optimizer states of trainable parameters on one GPU."""
    if strategy.offload:
        # Weights and optimizer states live in host memory; the GPU holds its gradient partition.
        return GRADIENT_BYTES * parameters // gpus
    if strategy.zero_stage == 3:
        return (WEIGHT_BYTES + GRADIENT_BYTES + OPTIMIZER_BYTES) * parameters // gpus
    if strategy.zero_stage == 2:
        return WEIGHT_BYTES * parameters + (GRADIENT_BYTES + OPTIMIZER_BYTES) * parameters // gpus
    return (WEIGHT_BYTES + GRADIENT_BYTES + OPTIMIZER_BYTES) * parameters


def frozen_bytes(parameters: int, gpus: int, strategy: Strategy) -> int:
    """bf16 weights of frozen models on one GPU (ZeRO-3 partitions them too)."""
    share = gpus if strategy.zero_stage == 3 else 1
    return WEIGHT_BYTES * parameters // share


def activation_bytes(
    model: ModelShape, batch: int, tokens: int, checkpointing: bool, logit_tokens: int
) -> int:
    """Activations kept for the backward pass of one micro-batch, with fp32 logits for `logit_tokens`."""
    per_layer = batch * tokens * model.hidden
    if checkpointing:
        kept = CHECKPOINT_BYTES * per_layer * model.layers + ACTIVATION_BYTES * per_layer
    else:
        kept = ACTIVATION_BYTES * per_layer * model.layers
    return kept + LOGIT_BYTES * batch * logit_tokens * model.vocab


def kv_cache_bytes(model: ModelShape, batch: int, tokens: int) -> int:
    """bf16 keys and values of every layer for a generation batch."""
    return 2 * model.layers * model.kv_width * tokens * batch * WEIGHT_BYTES


def colocated_engine_bytes(recipe: Recipe, gpu_memory: float) -> int | None:
    """What a colocated vLLM engine takes of each GPU (vLLM reserves `gpu_memory_utilization` of it, weights
    and KV cache included); None when no engine shares the training GPUs."""
    generation = recipe.generation
    if generation.backend != "vllm" or generation.vllm.mode != "colocate":
        return None
    return int(generation.vllm.gpu_memory_utilization * gpu_memory * GB)


def estimate(
    recipe: Recipe,
    trainable: list[ModelShape],
    frozen: list[ModelShape],
    gpus: int,
    strategy: Strategy,
    gpu_memory: float,
) -> Estimate:
    """One strategy's per-GPU bytes for a recipe's models."""
    policy = next(m for m in [*trainable, *frozen] if m.name.startswith("policy"))
    tokens = sequence_tokens(recipe)
    batch = recipe.training.per_device_batch_size
    checkpointing = recipe.model.gradient_checkpointing
    # The policy's activations (through its adapters under LoRA) and, for PPO, the critic's, which has
    # no vocabulary logits. Both algorithms compute logits for the completion's positions only.
    logit_tokens = recipe.generation.max_new_tokens
    critics = [m for m in trainable if m.name == "critic"]
    activations = activation_bytes(policy, batch, tokens, checkpointing, logit_tokens) + sum(
        activation_bytes(m, batch, tokens, checkpointing, logit_tokens=0) for m in critics
    )
    generation = kv_cache_bytes(policy, ALGORITHMS[recipe.algorithm].generation_batch(recipe), tokens)
    engine = colocated_engine_bytes(recipe, gpu_memory)
    if engine is not None:
        # vLLM generates instead of transformers: its engine's share replaces the KV cache and the gathered
        # weights (ZeRO-3 parameters are gathered one at a time for the push); with sleep mode it is freed
        # while the trainer steps.
        sleeping = recipe.generation.vllm.sleep_mode
        return Estimate(
            strategy=strategy,
            trainable=sum(trainable_bytes(m.parameters, gpus, strategy) for m in trainable),
            frozen=sum(frozen_bytes(m.parameters, gpus, strategy) for m in frozen),
            activations=activations,
            generation=engine if sleeping else 0,
            engine=0 if sleeping else engine,
        )
    if strategy.zero_stage == 3:
        # Generation gathers the whole engine (ds3_gather_for_generation, on by default): the policy, and
        # PPO's critic, which trains in one engine with it.
        generation += WEIGHT_BYTES * (policy.parameters + sum(m.parameters for m in critics))
    return Estimate(
        strategy=strategy,
        trainable=sum(trainable_bytes(m.parameters, gpus, strategy) for m in trainable),
        frozen=sum(frozen_bytes(m.parameters, gpus, strategy) for m in frozen),
        activations=activations,
        generation=generation,
    )


def plan(recipe: Recipe, gpus: int, gpu_memory: float) -> Plan:
    """The recipe's models and their per-GPU memory under every strategy."""
    trainable, frozen = recipe_models(recipe)
    strategies = STRATEGIES if gpus > 1 else (ONE_GPU,)
    estimates = [estimate(recipe, trainable, frozen, gpus, s, gpu_memory) for s in strategies]
    return Plan(recipe.algorithm, gpus, gpu_memory, trainable, frozen, estimates)


def gigabytes(size: int) -> str:
    return f"{size / GB:.1f}"


def count(parameters: int) -> str:
    """7.62B, 660.9K, ..."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if parameters >= scale:
            return f"{parameters / scale:.2f}{suffix}"
    return str(parameters)


def describe_plan(result: Plan) -> str:
    """The plan as the table `llm-rl plan` prints."""
    lines = [f"{result.algorithm.upper()} on {result.gpus} GPU(s) of {result.gpu_memory:g} GB"]
    for kind, models in (("trainable", result.trainable), ("frozen", result.frozen)):
        for model in models:
            lines.append(f"  {model.name:<22} {count(model.parameters):>8} parameters, {kind}")
    header = f"{'strategy':<22} {'trainable':>9} {'frozen':>7} {'vllm':>5} {'activ.':>7} {'generate':>8} {'total':>7}  fits"
    lines += ["", "GB per GPU", header]
    for e in result.estimates:
        cells = (e.trainable, e.frozen, e.engine, e.activations, e.generation, e.total)
        widths = (9, 7, 5, 7, 8, 7)
        row = " ".join(f"{gigabytes(c):>{w}}" for c, w in zip(cells, widths, strict=True))
        lines.append(f"{e.strategy.name:<22} {row}  {'yes' if result.fits(e) else 'no'}")
    best = result.recommended
    lines.append("")
    if best is None:
        lines.append(
            f"nothing fits in {HEADROOM:.0%} of {result.gpu_memory:g} GB: use more GPUs, LoRA "
            "(model.lora.enabled), gradient checkpointing or a smaller micro-batch"
        )
    else:
        lines.append(f"recommended: {best.strategy.name}, --config_file {best.strategy.config}")
    lines.append(
        "total = trainable + frozen + vllm (a colocated engine's share) + the larger of activations "
        "(training) and generation, "
        f"+ {FIXED_ALLOWANCE // GB} GB for the CUDA context; fits = at most {HEADROOM:.0%} of the GPU"
    )
    return "\n".join(lines)


def algorithm_comparison(recipe: Recipe, result: Plan) -> str:
    """One line per other algorithm that puts the recipe's memory next to that algorithm's on the same
    models."""
    at = result.estimates.index(result.recommended) if result.recommended else 0
    mine = result.estimates[at]
    lines = []
    for other in ALGORITHMS:
        if other == recipe.algorithm:
            continue
        swapped = plan(recipe.model_copy(update={"algorithm": other}), result.gpus, result.gpu_memory)
        theirs = swapped.estimates[at]
        lines.append(
            f"the same models under {other.upper()}: {gigabytes(theirs.total)} GB per GPU with "
            f"{mine.strategy.name}, against {gigabytes(mine.total)} GB under {recipe.algorithm.upper()} "
            f"({theirs.total / mine.total:.0%})"
        )
    return "\n".join(lines)

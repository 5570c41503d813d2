"""vLLM as the rollout engine: an engine inside every training process, colocated with training, its
weights made equal to the policy's after every update.

Generation itself is TRL's (`trl.generation.vllm_generation.VLLMGeneration`: its sampling, and its walk
over the policy's parameters, one at a time under DeepSpeed ZeRO-3 and merged under LoRA). The engine is
started here, for three reasons:

- **precision**: vLLM turns a float32 model into bfloat16; this engine runs in the training precision
  (`generation.vllm.dtype`), so that on a CPU it samples exactly the policy being trained;
- **start-up**: eager on CPU, where compiling costs about 30 s a process and gains little, and a KV cache
  of the size the recipe gives;
- **weight sync that works on every platform** (`push_weights`): TRL hands each parameter to the
  engine's `load_weights`, which needs the engine's layers to hold checkpoint-format tensors. vLLM's CPU
  build repacks each linear layer's weight for its kernels after loading and leaves an empty `weight`
  behind; there the weights go through vLLM's in-place reload (`reload_weights`), which restores the
  layers, loads them and repacks them. Which one runs is read from the engine's layers when it starts.

GRPO and RLOO use `ColocatedVLLM` through TRL's trainers (`llm_rl.algorithms.trl_groups`); PPO through
`VLLMGenerator`, on the `Generator` interface.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase
from trl.generation.vllm_generation import VLLMGeneration, empty_cache

from llm_rl.generation.sampling import Completions, SamplingSettings, padded_completions, unpadded_prompts
from llm_rl.generation.vllm_settings import MAX_BATCHED_TOKENS, EngineSettings

if TYPE_CHECKING:
    from vllm import LLM


# One engine a process. vLLM's teardown destroys torch.distributed's default group, which under
# `accelerate launch` is the run's own, and an idle engine keeps its memory: so a later trainer in the same
# process (the next stage of a staged run) reuses the engine when it would start the same one, and its
# first generation pushes the new policy's weights into it.
ENGINES: dict[str, LLM] = {}


class ProcessPlace(NamedTuple):
    """Where this process sits in its run: what vLLM's `external_launcher` reads from the rank variables."""

    index: int = 0
    local_index: int = 0
    count: int = 1

    @classmethod
    def of(cls, accelerator: Accelerator) -> ProcessPlace:
        return cls(accelerator.process_index, accelerator.local_process_index, accelerator.num_processes)


def start_engine(
    settings: EngineSettings,
    place: ProcessPlace,
    seed: int,
    max_num_seqs: int | None,
    model_impl: str = "auto",
) -> LLM:
    """This process's vLLM engine for `settings`, started unless the process already runs the same one.

    vLLM's `external_launcher` joins the processes `accelerate launch` started instead of starting its own,
    so it reads the launch's rank variables (a plain `python` run gets a one-process rendezvous).
    """
    key = engine_key(settings, seed, max_num_seqs, model_impl)
    if key not in ENGINES:
        with rank_variables(place):
            ENGINES[key] = new_engine(settings, seed, max_num_seqs, model_impl)
    return ENGINES[key]


def engine_key(settings: EngineSettings, seed: int, max_num_seqs: int | None, model_impl: str) -> str:
    """What makes two engines the same: every setting, and the model's config rather than its folder (a
    stage's policy is the previous stage's, saved elsewhere, with the same architecture)."""
    config = json.loads((Path(settings.model) / "config.json").read_text())
    architecture = {
        key: value for key, value in config.items() if not key.startswith(("_", "transformers_version"))
    }
    fields = {**dataclasses.asdict(settings), "model": architecture}
    return json.dumps([fields, seed, max_num_seqs, model_impl], sort_keys=True, default=str)


@contextmanager
def rank_variables(place: ProcessPlace) -> Iterator[None]:
    """The rank and rendezvous variables vLLM reads while it starts, put back as they were afterwards: left
    set in a plain `python` run, they would make accelerate take the next trainer for a distributed one."""
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["RANK"] = str(place.index)
    os.environ["LOCAL_RANK"] = str(place.local_index)
    os.environ["WORLD_SIZE"] = str(place.count)
    # A launch's own rendezvous, or a fresh one on a port the kernel hands out (a fixed first choice, as
    # TRL's, collides when two runs start at once).
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def free_port() -> int:
    """A TCP port on the loopback interface that no process holds now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def new_engine(settings: EngineSettings, seed: int, max_num_seqs: int | None, model_impl: str) -> LLM:
    """A vLLM engine in this process, one of the run's data-parallel engines."""
    from vllm import LLM

    return LLM(
        model=settings.model,
        tokenizer=settings.tokenizer,
        dtype=settings.dtype,
        enforce_eager=settings.enforce_eager,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        kv_cache_memory_bytes=settings.kv_cache_bytes,
        max_model_len=settings.max_model_length,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=MAX_BATCHED_TOKENS,
        enable_sleep_mode=settings.sleep_mode,
        distributed_executor_backend="external_launcher",
        seed=seed,
        # The sampled tokens' log-probs after temperature and other logit processing: what TRL's
        # importance-sampling correction compares with the trainer's.
        logprobs_mode="processed_logprobs",
        generation_config="auto" if settings.model_generation_config else "vllm",
        model_impl=model_impl,
        trust_remote_code=settings.trust_remote_code,
        use_tqdm_on_load=settings.progress_bars,
    )


def engine_model(llm: LLM) -> torch.nn.Module:
    """The model inside a colocated engine (this process's shard of it)."""
    return llm.llm_engine.model_executor.driver_worker.model_runner.model


def holds_checkpoint_weights(model: torch.nn.Module) -> bool:
    """Whether every parameter of the engine's model still holds a tensor that a checkpoint's can be loaded
    into; False where the platform repacked weights for its kernels and left empty parameters behind."""
    return all(parameter.numel() > 0 for parameter in model.parameters())


def push_weights(llm: LLM, named_tensors: Iterable[tuple[str, torch.Tensor]], in_place_reload: bool) -> None:
    """Load checkpoint-named tensors into the engine: one `load_weights` call per tensor (TRL's way), or
    vLLM's in-place reload where the layers hold repacked weights.

    The in-place reload keeps each layer's tensors until the layer is complete; they are copied first,
    because under ZeRO-3 a gathered parameter is released as soon as the next one is gathered.
    """
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    if in_place_reload:
        copies = ((name, tensor.detach().clone()) for name, tensor in named_tensors)
        runner.reload_weights(weights_iterator=copies, is_checkpoint_format=True)
        return
    for name, tensor in named_tensors:
        runner.model.load_weights([(name, tensor)])


class ColocatedVLLM(VLLMGeneration):
    """TRL's vLLM generation in colocate mode, on an engine started by `start_engine`, with a weight sync
    that works on every platform (module docstring)."""

    def __init__(self, engine: EngineSettings, **trl_arguments: Any) -> None:
        """`trl_arguments`: `VLLMGeneration`'s own (model, accelerator, processing_class, sampling, ...)."""
        self.engine = engine
        super().__init__(mode="colocate", **trl_arguments)

    def _init_vllm(self) -> None:
        """TRL's colocate set-up (tensor-parallel groups, one seed per group) on llm_rl's engine."""
        accelerator, group = self.accelerator, self.tensor_parallel_size
        if accelerator.num_processes % group:
            raise ValueError(
                f"generation.vllm.tensor_parallel_size ({group}) must divide the {accelerator.num_processes} processes"
            )
        if group > 1:
            self.tp_group, _ = torch.distributed.new_subgroups_by_enumeration(
                [list(range(start, start + group)) for start in range(0, accelerator.num_processes, group)]
            )
        self.llm = start_engine(
            self.engine,
            ProcessPlace.of(accelerator),
            seed=accelerator.process_index // group,
            max_num_seqs=self.max_num_seqs,
            model_impl=self.model_impl,
        )
        self.in_place_reload = not holds_checkpoint_weights(engine_model(self.llm))
        if self.enable_sleep_mode and not self.llm.llm_engine.is_sleeping():
            self.llm.sleep(level=2)
        self._llm_weights_sleeping = self.enable_sleep_mode
        accelerator.wait_for_everyone()

    def sync_weights(self) -> None:
        """The policy's current weights into the engine, then its prefix cache emptied: cached keys and
        values were computed with the old weights."""
        if self.enable_sleep_mode:
            empty_cache()
            self.llm.wake_up(tags=["weights"])
            self._llm_weights_sleeping = False
        push_weights(self.llm, self._iter_named_params(), self.in_place_reload)
        self.llm.reset_prefix_cache()


def vllm_sampling(sampling: SamplingSettings) -> dict[str, Any]:
    """`SamplingSettings` as vLLM's `SamplingParams` fields: the settings given and nothing else (no model
    generation config), stopping at the settings' stop tokens alone (with none, only the length limit)."""
    return {
        "temperature": 0.0 if sampling.greedy else sampling.temperature,
        "top_p": 1.0 if sampling.greedy else sampling.top_p,
        "top_k": 0 if sampling.greedy else sampling.top_k,
        "max_tokens": sampling.max_new_tokens,
        "stop_token_ids": list(sampling.stop_token_ids),
        "ignore_eos": True,
        "min_tokens": sampling.min_new_tokens or 0,
    }


# TRL's `VLLMGeneration` copies these vLLM fields into attributes of its own at start-up, and passes the
# rest through `generation_kwargs`.
TRL_SAMPLING_ATTRIBUTES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_completion_length",
}


@contextmanager
def sampling_as(rollouts: VLLMGeneration, sampling: SamplingSettings) -> Iterator[None]:
    """While generating, TRL's vLLM generation samples with `sampling`; its own settings come back after (a
    GRPO trainer's, when held-out evaluation borrows its engine)."""
    fields = vllm_sampling(sampling)
    values = {TRL_SAMPLING_ATTRIBUTES[name]: fields.pop(name) for name in TRL_SAMPLING_ATTRIBUTES}
    values |= {"min_p": 0.0, "repetition_penalty": 1.0, "generation_kwargs": fields}
    saved = {name: getattr(rollouts, name) for name in values}
    for name, value in values.items():
        setattr(rollouts, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(rollouts, name, value)


class VLLMGenerator:
    """A `Generator` on a colocated vLLM engine: PPO's rollouts, and held-out evaluation on any algorithm's
    engine.

    The engine samples with `sampling` alone (never the model's generation config) and stops at its stop
    tokens. It receives the policy's weights before it first generates (a resumed or warm-started policy
    is not the folder it started from, and an evaluation comes between updates) and again after every
    update.
    """

    def __init__(self, rollouts: ColocatedVLLM, sampling: SamplingSettings) -> None:
        self.rollouts = rollouts
        self.sampling = sampling
        self.stale = True

    @classmethod
    def start(
        cls,
        policy: torch.nn.Module,
        accelerator: Accelerator,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingSettings,
        engine: EngineSettings,
        max_num_seqs: int,
    ) -> VLLMGenerator:
        """A generator on this process's engine for `engine`, holding `policy`'s weights."""
        rollouts = ColocatedVLLM(
            engine,
            model=policy,
            accelerator=accelerator,
            processing_class=tokenizer,
            tensor_parallel_size=engine.tensor_parallel_size,
            gpu_memory_utilization=engine.gpu_memory_utilization,
            max_model_length=engine.max_model_length,
            max_num_seqs=max_num_seqs,
            enable_sleep_mode=engine.sleep_mode,
            # vLLM's own implementation of the architecture, as TRL's GRPO has it (`check_architecture`).
            model_impl="vllm",
            trust_remote_code=engine.trust_remote_code,
            max_completion_length=sampling.max_new_tokens,
        )
        return cls(rollouts, sampling)

    def weights_updated(self) -> None:
        """The policy changed: the engine takes its weights before it generates again."""
        self.stale = True

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        if self.stale:
            self.rollouts.sync_weights()
            self.stale = False
        with sampling_as(self.rollouts, self.sampling):
            _, completion_ids, logprobs, _ = self.rollouts.generate(
                unpadded_prompts(prompt_ids, prompt_mask), images=None, num_generations=1
            )
        rows = [torch.tensor(ids, dtype=torch.long) for ids in completion_ids]
        completions = padded_completions(rows, self.sampling).to(prompt_ids.device)
        return Completions(completions, sampler_logprobs(logprobs, completions.shape, prompt_ids.device))


def sampler_logprobs(
    logprobs: list[list[list[float | None]]] | None, shape: torch.Size, device: torch.device
) -> torch.Tensor | None:
    """[batch, width] log-probs the engine gave its sampled tokens (0 past each completion's end)."""
    if logprobs is None:
        return None
    table = torch.zeros(shape, dtype=torch.float32)
    for row, tokens in enumerate(logprobs):
        values = [token[0] if token and token[0] is not None else 0.0 for token in tokens[: shape[1]]]
        table[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return table.to(device)


class FolderVLLMGenerator:
    """A `Generator` on a vLLM engine started from a saved policy (`llm-rl sample`): the engine loads the
    folder's weights itself, so there is nothing to push."""

    def __init__(self, llm: LLM, sampling: SamplingSettings) -> None:
        self.llm = llm
        self.sampling = sampling

    @classmethod
    def start(cls, engine: EngineSettings, sampling: SamplingSettings, seed: int = 0) -> FolderVLLMGenerator:
        """An engine of this process alone for the folder `engine.model`."""
        return cls(start_engine(engine, ProcessPlace(), seed=seed, max_num_seqs=None), sampling)

    def weights_updated(self) -> None:
        """Nothing to do: the engine serves the folder's weights."""

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        from vllm import SamplingParams

        prompts = [{"prompt_token_ids": ids} for ids in unpadded_prompts(prompt_ids, prompt_mask)]
        outputs = self.llm.generate(prompts, SamplingParams(**vllm_sampling(self.sampling)), use_tqdm=False)
        rows = [torch.tensor(list(output.outputs[0].token_ids), dtype=torch.long) for output in outputs]
        return Completions(padded_completions(rows, self.sampling))

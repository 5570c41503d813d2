"""TRL's colocated vLLM generation on llm_rl's engine (`engine.start_engine`), with a weight sync that works
on every platform: `load_weights` per tensor, or vLLM's in-place reload where the layers hold repacked
weights."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from trl.generation.vllm_generation import VLLMGeneration, empty_cache

from llm_rl.generation.vllm_engine.engine import ProcessPlace, start_engine
from llm_rl.generation.vllm_settings import EngineSettings

if TYPE_CHECKING:
    from vllm import LLM


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

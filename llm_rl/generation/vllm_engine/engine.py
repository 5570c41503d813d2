"""Starting this process's vLLM engine: one a process, reused by a later trainer that would start the same
one, joined to the run's processes through vLLM's `external_launcher`."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from accelerate import Accelerator

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

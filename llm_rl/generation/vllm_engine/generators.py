"""The `Generator` interface on vLLM engines: a colocated one that takes the policy's weights (PPO's
rollouts, held-out evaluation), and one started from a saved policy (`llm-rl sample`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from llm_rl.generation.sampling import Completions, SamplingSettings, padded_completions, unpadded_prompts
from llm_rl.generation.vllm_engine.colocated import ColocatedVLLM
from llm_rl.generation.vllm_engine.engine import ProcessPlace, start_engine
from llm_rl.generation.vllm_engine.sampling_params import sampling_as, vllm_sampling
from llm_rl.generation.vllm_settings import EngineSettings

if TYPE_CHECKING:
    from vllm import LLM


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

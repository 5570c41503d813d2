"""Completions from a saved policy: the generator behind `llm-rl serve`, and `llm-rl sample`.

The policy is a run folder (its `final/`, or its latest checkpoint before it has one), a `final/`, a
checkpoint or a LoRA adapter (merged into its base, cached). Prompts are formatted as the run formatted
them in training: its recipe's chat template and system prompt, read from the run folder's recipe.yaml.
Completions come from the generation layer (`llm_rl.generation`) on any backend: by default the run's
own where this host can run it, else transformers' `generate` (`hf`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.streamers import BaseStreamer

from llm_rl.data.prompts import format_prompt, has_chat_template, load_prompt_data, prompt_token_ids
from llm_rl.errors import ModelError, RecipeError, first_line
from llm_rl.generation.backends import check_backend
from llm_rl.generation.generators import build_generator
from llm_rl.generation.sampling import Generator, SamplingSettings, left_padded, sampling_only
from llm_rl.generation.vllm_settings import folder_engine_settings
from llm_rl.models.completions import cut_after_stop, eos_token_ids, trimmed
from llm_rl.models.load import is_adapter_folder, merged_adapter_path
from llm_rl.recipe.load import load_run_recipe
from llm_rl.rewards import build_reward_functions
from llm_rl.rewards.scoring import RewardAdapter
from llm_rl.run_folder import RECIPE_FILE
from llm_rl.schema import DataSection, Recipe
from llm_rl.tools.export import policy_folder


@dataclass(frozen=True)
class GenerationRequest:
    """Prompts and how to sample their completions (temperature 0: greedy)."""

    prompts: list[Any]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0

    @property
    def settings(self) -> tuple[int, float, float]:
        """What requests must share to be generated in one batch."""
        return (self.max_new_tokens, self.temperature, self.top_p)


def tool_backend(requested: str, recipe: Recipe | None) -> str:
    """The backend a tool generates with: `auto` is the run's own where this host can run it, else `hf`; a
    backend named outright must run here (a `RecipeError` naming `--backend` otherwise)."""
    if requested != "auto":
        try:
            return check_backend(requested)
        except RecipeError as err:
            raise RecipeError(str(err).replace("generation.backend", "--backend", 1)) from None
    wanted = recipe.generation.backend if recipe is not None else "hf"
    try:
        return check_backend(wanted)
    except RecipeError:
        return "hf"


def run_recipe(folder: Path) -> Recipe | None:
    """The recipe of the run a policy folder belongs to (the folder's, or its parent's recipe.yaml), as it
    ran: its generation backend need not run on this host (`tool_backend` falls back to `hf`)."""
    for candidate in (folder, folder.parent, folder.parent.parent):
        if (candidate / RECIPE_FILE).is_file():
            return load_run_recipe(candidate / RECIPE_FILE)
    return None


class PolicyGenerator:
    """A loaded policy and tokenizer that turn prompts into completions, in batches, on `backend`."""

    def __init__(self, folder: Path, recipe: Recipe | None, backend: str = "auto") -> None:
        self.folder = folder
        self.recipe = recipe
        self.weights = merged_adapter_path(folder) if is_adapter_folder(folder) else folder
        self.backend = tool_backend(backend, recipe)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            self.model = AutoModelForCausalLM.from_pretrained(self.weights)
        except Exception as err:
            raise ModelError(f"the policy does not load: {first_line(err)}", where=str(folder)) from None
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()
        data = recipe.data if recipe is not None else DataSection()
        self.use_template = has_chat_template(self.tokenizer) and data.chat_template
        self.system_prompt = data.system_prompt
        self.default_new_tokens = recipe.generation.max_new_tokens if recipe is not None else 256
        self.stop_token_ids = eos_token_ids(self.tokenizer, self.model.generation_config)
        self.pad = self.tokenizer.pad_token_id
        if self.pad is None:
            self.pad = self.tokenizer.eos_token_id
        self.accelerator = Accelerator(cpu=self.device.type == "cpu")

    @classmethod
    def from_source(cls, source: Path, backend: str = "auto") -> PolicyGenerator:
        folder = policy_folder(source)
        return cls(folder, run_recipe(folder), backend)

    def encode(self, prompts: list[Any]) -> list[list[int]]:
        """Token ids of each prompt, formatted as in training."""
        return [
            prompt_token_ids(format_prompt(prompt, self.use_template, self.system_prompt), self.tokenizer)
            for prompt in prompts
        ]

    def sampling(self, request: GenerationRequest) -> SamplingSettings:
        """A request's sampling settings (temperature 0: greedy), with the policy's stop tokens."""
        return SamplingSettings(
            max_new_tokens=request.max_new_tokens,
            temperature=request.temperature if request.temperature > 0 else 1.0,
            top_p=request.top_p,
            stop_token_ids=self.stop_token_ids,
            pad_token_id=self.pad,
            backend=self.backend,
            greedy=request.temperature == 0,
        )

    def generator(self, sampling: SamplingSettings) -> Generator:
        """The generation layer's generator for the backend: an engine from the saved folder for vLLM
        (started once, kept for later calls), transformers on the loaded model otherwise."""
        if sampling.backend == "vllm":
            from llm_rl.generation.vllm_engine.generators import FolderVLLMGenerator

            return FolderVLLMGenerator.start(
                folder_engine_settings(self.folder, self.weights, self.recipe), sampling
            )
        chunk = max(1, self.recipe.evaluation.batch_size if self.recipe is not None else 64)
        return build_generator(lambda: self.model, self.accelerator, sampling, chunk, policy_of=lambda m: m)

    @torch.no_grad()
    def generate_ids(
        self, prompt_ids: list[list[int]], request: GenerationRequest, streamer: BaseStreamer | None = None
    ) -> torch.Tensor:
        """The completions' token ids, one row per prompt, padded after the first stop token; a streamer
        hears each step's tokens as they are made (`llm-rl serve`'s streamed answers, on transformers'
        `generate`)."""
        sampling = self.sampling(request)
        input_ids, attention = left_padded(prompt_ids, self.pad)
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        if streamer is None:
            return self.generator(sampling).generate(input_ids, attention).completion_ids.cpu()
        config = sampling.generation_config()
        with sampling_only(self.model, config):
            output = self.model.generate(
                input_ids=input_ids, attention_mask=attention, generation_config=config, streamer=streamer
            )
        return cut_after_stop(output[:, input_ids.shape[1] :].cpu(), self.stop_token_ids, self.pad)

    def generate(self, prompt_ids: list[list[int]], request: GenerationRequest) -> list[dict[str, Any]]:
        """Each completion's text, token count and why it ended (`eos` or `length`)."""
        responses = self.generate_ids(prompt_ids, request)
        return [self.describe(row) for row in responses.tolist()]

    def describe(self, row: list[int]) -> dict[str, Any]:
        """A completion's text, token count and why it ended, from its padded ids."""
        ids = trimmed(torch.tensor([row]), self.stop_token_ids)[0]
        return {
            "text": self.tokenizer.decode(ids, skip_special_tokens=True),
            "tokens": len(ids),
            "finish_reason": "eos" if ids and ids[-1] in self.stop_token_ids else "length",
        }


def sample_file(
    source: Path, prompts_file: Path, greedy: bool, max_new_tokens: int | None, backend: str = "auto"
) -> list[dict]:
    """Completions for every row of a prompts file, scored by the run's reward functions."""
    generator = PolicyGenerator.from_source(source, backend)
    recipe = generator.recipe
    if recipe is None:
        raise RecipeError(
            f"no {RECIPE_FILE} beside the policy: sample scores with the run's reward functions",
            where=str(source),
        )
    data = recipe.data.model_copy(
        update={"source": str(prompts_file), "split": "train", "eval_split": None, "limit": None}
    )
    rows = load_prompt_data(data, generator.tokenizer, recipe.run.seed).train
    adapter = RewardAdapter(build_reward_functions(recipe.rewards), rows, generator.tokenizer)
    generation = recipe.generation
    request = GenerationRequest(
        prompts=list(rows["prompt"]),
        max_new_tokens=max_new_tokens or generation.max_new_tokens,
        temperature=0.0 if greedy else generation.temperature,
        top_p=generation.top_p,
    )
    prompt_ids = [prompt_token_ids(prompt, generator.tokenizer) for prompt in request.prompts]
    results = []
    batch = recipe.evaluation.batch_size
    for start in range(0, len(prompt_ids), batch):
        indices = list(range(start, min(start + batch, len(prompt_ids))))
        responses = generator.generate_ids([prompt_ids[i] for i in indices], request)
        scores, per_function = adapter(indices, trimmed(responses, generator.stop_token_ids))
        for offset, index in enumerate(indices):
            completion = generator.describe(responses[offset].tolist())
            results.append(
                {
                    "prompt": request.prompts[index],
                    "completion": completion["text"],
                    "finish_reason": completion["finish_reason"],
                    "reward": float(scores[offset]),
                    "rewards": {
                        name: (None if torch.isnan(value) else float(value))
                        for name, value in zip(adapter.rewards.names, per_function[offset], strict=True)
                    },
                }
            )
    return results


def print_samples(results: list[dict], as_json: bool) -> None:
    """One JSON object per line, or a table with the mean reward under it."""
    if as_json:
        for result in results:
            print(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("prompt", "completion", "reward", *results[0]["rewards"] if results else ())
    for result in results:
        per_function = [f"{v:.3g}" if v is not None else "-" for v in result["rewards"].values()]
        prompt = result["prompt"] if isinstance(result["prompt"], str) else result["prompt"][-1]["content"]
        table.add_row(prompt, result["completion"], f"{result['reward']:.3g}", *per_function)
    console = Console()
    console.print(table)
    if results:
        mean = sum(r["reward"] for r in results) / len(results)
        console.print(f"{len(results)} prompts, mean reward {mean:.4f}")

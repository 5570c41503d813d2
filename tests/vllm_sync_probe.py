"""A short run on `generation.backend: vllm` that checks, every time the trainer generates, that its engine
holds the policy's current weights. Run as a script: `python tests/vllm_sync_probe.py RECIPE [--skip-sync]
[--set key=value ...]`.

Right before each of the trainer's own generate calls (after its weight sync), the engine's greedy
completions of fixed probe prompts are taken beside transformers' greedy completions of the policy as the
trainer holds it at that moment, and both are written to `<output_dir>/sync-probe.json`. `--skip-sync`
turns the engine's weight push into nothing: the control that shows the comparison can fail.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import torch

from llm_rl.algorithms.base import build_components
from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.recipe.load import load_recipe

PROBE_TOKENS = 4


def probe_prompts(tokenizer: Any) -> list[list[int]]:
    """Every single-digit sum, as the embedded task writes them."""
    return [tokenizer(f"{a}+{b}=")["input_ids"] for a in range(10) for b in range(10)]


def up_to_stop(tokens: list[int], stop: int) -> list[int]:
    """A completion's tokens up to and with its first stop token."""
    return tokens[: tokens.index(stop) + 1] if stop in tokens else tokens


def engine_greedy(engine: Any, prompts: list[list[int]], stop: int) -> list[list[int]]:
    """The engine's greedy completions of the prompts."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS, stop_token_ids=[stop], ignore_eos=True)
    outputs = engine.llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    return [up_to_stop(list(output.outputs[0].token_ids), stop) for output in outputs]


@torch.no_grad()
def transformers_greedy(
    policy: torch.nn.Module, prompts: list[list[int]], stop: int, pad: int
) -> list[list[int]]:
    """transformers' greedy completions of the prompts by the policy as it is now, one prompt a call, in eval
    mode (LoRA's dropout stays out of it, as it stays out of the merged weights the engine gets)."""
    training = policy.training
    policy.eval()
    rows = []
    for ids in prompts:
        output = policy.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=PROBE_TOKENS,
            eos_token_id=stop,
            pad_token_id=pad,
        )
        rows.append(up_to_stop(output[0, len(ids) :].tolist(), stop))
    policy.train(training)
    return rows


def watch(engine: Any, policy: torch.nn.Module, tokenizer: Any, probes: list[dict]) -> None:
    """Take a probe before every generate call of the engine."""
    prompts = probe_prompts(tokenizer)
    stop, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    generate: Callable[..., Any] = engine.generate

    def probed_generate(*args: Any, **kwargs: Any) -> Any:
        probes.append(
            {
                "engine": engine_greedy(engine, prompts, stop),
                "transformers": transformers_greedy(policy, prompts, stop, pad),
            }
        )
        return generate(*args, **kwargs)

    engine.generate = probed_generate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("--skip-sync", action="store_true")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    recipe = load_recipe(args.recipe, args.overrides)
    algorithm = ALGORITHMS[recipe.algorithm]
    components = build_components(recipe)
    algorithm.prepare(components)
    trainer = algorithm.build_trainer(components, [])
    # GRPO and RLOO: TRL's trainer holds the engine; PPO: its generator does.
    engine = getattr(trainer, "vllm_generation", None) or trainer.generator.rollouts
    policy = trainer.model.policy if hasattr(trainer.model, "policy") else trainer.model
    if args.skip_sync:
        engine.sync_weights = lambda: None
    probes: list[dict] = []
    watch(engine, policy, components.tokenizer, probes)
    trainer.train()
    recipe.output_dir.mkdir(parents=True, exist_ok=True)
    (recipe.output_dir / "sync-probe.json").write_text(json.dumps(probes))


if __name__ == "__main__":
    main()

"""Generation backends side by side on this host: `hf` against `static` (and `paged` with `--paged`) on
the embedded tiny model, through PPO's generator interface, the path a rollout takes.

    python scripts/generation_backends.py [--batches 64 256] [--new-tokens 3 16] [--repeats 5] [--paged]

For each batch size and completion length, each backend generates the same prompts `--repeats` times,
the backends alternating within each repeat and the order reversed every other repeat, so that drift
in the machine's speed reaches every backend alike. The first call of each backend is reported apart
(it includes `static`'s compilation); the steady figure is the median of the rest. Ratios are
tokens/s against `hf` measured in the same run. This is what `generation.backend: auto` is chosen
from on CPU (llm_rl/generation/backends.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llm_rl.algorithms.ppo.forward import PolicyAndCritic  # noqa: E402
from llm_rl.generation.generators import build_generator  # noqa: E402
from llm_rl.generation.sampling import SamplingSettings  # noqa: E402
from llm_rl.models.completions import response_lengths  # noqa: E402
from llm_rl.models.tiny import build_tokenizer, tiny_model_path  # noqa: E402


def prompt_batch(tokenizer, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` single-digit sums, left-padded as the prompt loader batches them."""
    texts = [f"{i % 10}+{(i * 7) % 10}=" for i in range(size)]
    batch = tokenizer.pad({"input_ids": [tokenizer(text)["input_ids"] for text in texts]})
    return torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]).bool()


def timed_call(generator, prompts, stop_ids: list[int]) -> tuple[float, int]:
    """(seconds, generated tokens up to each completion's stop) of one generate call."""
    started = time.perf_counter()
    completions = generator.generate(*prompts).completion_ids
    seconds = time.perf_counter() - started
    return seconds, int((response_lengths(completions, stop_ids) + 1).sum())


def measure(backends: list[str], batch: int, new_tokens: int, repeats: int) -> dict[str, dict[str, float]]:
    """Each backend's first-call seconds and steady tokens/s at one batch size and length."""
    tokenizer = build_tokenizer()
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()
    critic = AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    holder = PolicyAndCritic(policy, critic)  # what the PPO trainer hands its generator
    stop_ids = [tokenizer.eos_token_id]
    generators = {}
    for backend in backends:
        sampling = SamplingSettings(max_new_tokens=new_tokens, temperature=1.0, stop_token_ids=stop_ids,
                                    pad_token_id=tokenizer.pad_token_id, backend=backend)  # fmt: skip
        generators[backend] = build_generator(
            lambda: holder, Accelerator(cpu=True), sampling, chunk_size=batch
        )
    prompts = prompt_batch(tokenizer, batch)
    first: dict[str, float] = {}
    rates: dict[str, list[float]] = {backend: [] for backend in backends}
    for repeat in range(repeats + 1):
        order = backends if repeat % 2 == 0 else backends[::-1]
        for backend in order:
            torch.manual_seed(repeat)
            seconds, tokens = timed_call(generators[backend], prompts, stop_ids)
            if repeat == 0:
                first[backend] = seconds
            else:
                rates[backend].append(tokens / seconds)
    return {
        backend: {"first_call_s": first[backend], "tokens_per_s": statistics.median(rates[backend])}
        for backend in backends
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[3, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paged", action="store_true", help="measure paged too (slow on CPU)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    backends = ["hf", "static", *(["paged"] if args.paged else [])]
    print(f"# {platform.node()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{'cuda' if torch.cuda.is_available() else 'cpu'}")  # fmt: skip
    print(f"{'batch':>5} {'new':>4} {'backend':>7} {'first call s':>12} {'tokens/s':>10} {'vs hf':>6}")
    results = []
    for batch in args.batches:
        for new_tokens in args.new_tokens:
            measured = measure(backends, batch, new_tokens, args.repeats)
            for backend, numbers in measured.items():
                ratio = numbers["tokens_per_s"] / measured["hf"]["tokens_per_s"]
                print(f"{batch:>5} {new_tokens:>4} {backend:>7} {numbers['first_call_s']:>12.2f} "
                      f"{numbers['tokens_per_s']:>10.0f} {ratio:>6.2f}", flush=True)  # fmt: skip
                results.append({"batch": batch, "new_tokens": new_tokens, "backend": backend, **numbers,
                                "ratio_to_hf": ratio})  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

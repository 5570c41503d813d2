"""GPU check: a short GRPO and a short PPO run in bf16 on a locally built model, with their throughput.

    python scripts/gpu_check.py [--steps 10] [--layers 12] [--hidden 1024] [--new-tokens 128]

Builds a Llama of about 150M parameters (random weights, the embedded task's character tokenizer: no
download) and trains it for `--steps` updates with each algorithm on the embedded arithmetic prompts,
each run in its own process, so that each one's peak memory is its own. EOS is held back
(`generation.min_new_tokens`), so both algorithms' completions run to `--new-tokens`. It prints, per
algorithm, samples/s and generated tokens/s (the first update left out: it includes CUDA's warm-up) and
the peak GPU memory. About 2-4 minutes on one recent GPU. `--allow-cpu` runs the same thing in fp32 on a
CPU, which is only useful to check the script itself.

`--overhead` also measures, as `scripts/benchmark.py` does on the embedded model: what our GRPO costs
over TRL's `GRPOTrainer` built by hand at this scale (`--repeats` alternating runs per side, wall-time and
memory ratios), and where our PPO's update time goes (with a `reward_model` reward on the same body), by
phase. Three more runs a repeat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from benchmark import OVERHEAD_HEADER, alternate, build_reward_model, overhead_table, phase_table  # noqa: E402
from learning_curve import run_seed  # noqa: E402

from llm_rl.models.tiny import TinyModelSettings, tiny_model_path  # noqa: E402
from llm_rl.run_folder import read_rows  # noqa: E402

ALGORITHMS = ("grpo", "ppo")


def build_model(layers: int, hidden: int) -> Path:
    """A randomly initialised Llama with the embedded tokenizer, cached like the embedded model."""
    settings = TinyModelSettings(
        layers=layers,
        hidden=hidden,
        heads=max(1, hidden // 64),
        intermediate=hidden * 11 // 4,
        warmup_steps=0,
    )
    return tiny_model_path(settings)


def run_overrides(
    model: Path, steps: int, new_tokens: int, on_gpu: bool, hold_length: bool = True
) -> list[str]:
    """The embedded recipe at a GPU's scale: 64 samples an update, long completions, no checkpoints.

    `hold_length` holds EOS back for `new_tokens`; the overhead comparison leaves it out, to measure
    completions as the model ends them.
    """
    precision = ["training.precision=bf16", "model.dtype=bfloat16"] if on_gpu else ["training.precision=fp32"]
    return [
        f"model.policy={model}",
        f"training.max_steps={steps}",
        "training.per_device_batch_size=64",
        f"generation.max_new_tokens={new_tokens}",
        *([f"generation.min_new_tokens={new_tokens}"] if hold_length else []),
        "checkpointing.every=1000000000",
        "ppo.critic_warmup_steps=0",
        *precision,
    ]


def measure(run: Path) -> dict[str, float]:
    """samples/s and tokens/s over the updates after the first, and the peak memory, from metrics.jsonl."""
    rows = read_rows(run)
    steady = rows[1:] or rows
    samples_per_second = statistics.mean(row["samples_per_second"] for row in steady)
    tokens = statistics.mean(row["completion_length/mean"] for row in steady)
    return {
        "samples/s": samples_per_second,
        "tokens/s": samples_per_second * tokens,
        "completion tokens": tokens,
        "peak memory (MB)": max(row["peak_memory_mb"] for row in rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10, help="updates per algorithm")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=128, help="completion length")
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "gpu_check")
    parser.add_argument("--allow-cpu", action="store_true", help="run without a GPU (checks the script only)")
    parser.add_argument("--overhead", action="store_true", help="also measure our cost over TRL alone")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per side with --overhead")
    args = parser.parse_args()

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.allow_cpu:
        print(
            "error: no CUDA GPU is visible to torch (pass --allow-cpu to check the script on a CPU)",
            file=sys.stderr,
        )
        return 2
    device = torch.cuda.get_device_name(0) if on_gpu else "CPU"
    model = build_model(args.layers, args.hidden)
    parameters = json.loads((model / "config.json").read_text())
    print(
        f"device: {device}; torch {torch.__version__}; model: {args.layers} layers, hidden {parameters['hidden_size']}"
    )
    results = {}
    for algorithm in ALGORITHMS:
        run = args.output / algorithm
        seconds = run_seed(algorithm, 0, run, run_overrides(model, args.steps, args.new_tokens, on_gpu))
        results[algorithm] = {**measure(run), "wall seconds": seconds}
    names = list(results["grpo"])
    print(f"{'':<20}" + "".join(f"{a:>12}" for a in ALGORITHMS))
    for name in names:
        print(f"{name:<20}" + "".join(f"{results[a][name]:>12.1f}" for a in ALGORITHMS))
    if args.overhead:
        overrides = run_overrides(model, args.steps, args.new_tokens, on_gpu, hold_length=False)
        print_overhead(args.output / "overhead", model, args.steps, args.repeats, overrides)
    return 0


def print_overhead(root: Path, model: Path, steps: int, repeats: int, overrides: list[str]) -> None:
    """Our GRPO against TRL's built by hand, and our PPO's update by phase, on this model: the
    benchmark's tables."""
    reward_model = build_reward_model(root / "reward_model", body=str(model))
    runs = alternate(["grpo-trl", "grpo-ours", "ppo-ours"], repeats, root, steps, reward_model, overrides)
    print()
    for line in [
        *OVERHEAD_HEADER,
        *overhead_table("GRPO", runs, "grpo-ours", "grpo-trl"),
        *phase_table(runs["ppo-ours"]),
    ]:
        print(line)


if __name__ == "__main__":
    sys.exit(main())

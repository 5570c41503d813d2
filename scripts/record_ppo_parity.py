"""Record two PPO updates of the TRL-based trainer (trl 1.12.0) as a test fixture, before it is replaced.

    python scripts/record_ppo_parity.py [--out tests/fixtures/ppo_parity.pt]

The embedded model, fixed seed, CPU, fp32. For each update it saves the rollout as our loop received it
(token ids, generation log-probs, reference log-probs, values, scores), the mini-batch orders, and what
TRL's maths made of it: KL, per-token rewards, advantages, returns, every micro-batch's losses and
gradient norms, and the update's metrics. `tests/test_ppo_parity.py` replays both updates through
llm_rl's own PPO and compares.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from transformers import set_seed  # noqa: E402

from llm_rl import ppo  # noqa: E402
from llm_rl.checkpoints import CheckpointManager  # noqa: E402
from llm_rl.early_stopping import MetricWindow  # noqa: E402
from llm_rl.ppo_trainer import UnifiedPPOTrainer  # noqa: E402
from llm_rl.recipe import load_recipe  # noqa: E402
from llm_rl.run import build_components  # noqa: E402
from llm_rl.tiny_model import tiny_model_path  # noqa: E402

# The recorded run: the embedded PPO recipe with every part of PPO's maths switched on.
OVERRIDES = [
    "training.per_device_batch_size=8",
    "training.gradient_accumulation_steps=4",
    "training.max_steps=2",
    "training.learning_rate=3e-4",
    "generation.max_new_tokens=5",
    "ppo.num_ppo_epochs=2",
    "ppo.num_mini_batches=2",
    "ppo.kl_coef=0.05",
    "ppo.missing_eos_penalty=0.5",
    "ppo.entropy_coef=0.01",
    "monitoring.wandb.mode=disabled",
    "monitoring.progress=false",
]
VARIANT = [
    "generation.max_new_tokens=2",
    "ppo.kl_estimator=k3",
    "ppo.whiten_rewards=true",
    "ppo.vf_coef=0.5",
    "ppo.gamma=0.99",
]


def fingerprint(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def record(output_dir: Path, extra: list[str]) -> dict:
    recipe = load_recipe(
        REPO / "recipes" / "arithmetic" / "ppo.yaml", [*OVERRIDES, *extra, f"run.output_dir={output_dir}"]
    )
    set_seed(recipe.run.seed)
    components = build_components(recipe)
    ppo.prepare(components)
    checkpoints = CheckpointManager(
        ppo.count_samples(recipe), None, MetricWindow.for_early_stopping(recipe.early_stopping)
    )
    trainer = ppo.build_trainer(components, [checkpoints])
    updates: list[dict] = []
    current: dict = {}

    original_advantages = UnifiedPPOTrainer.advantages
    original_loss = UnifiedPPOTrainer.micro_batch_loss
    original_clip = UnifiedPPOTrainer.clip_gradients
    original_metrics = UnifiedPPOTrainer.update_metrics
    original_permutation = np.random.permutation

    def advantages(self, batch):
        current.clear()
        current["inputs"] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in batch.items()}
        out = original_advantages(self, batch)
        current["outputs"] = {
            k: out[k].clone()
            for k in (
                "logprobs",
                "values",
                "scores",
                "kl",
                "non_score_reward",
                "advantages",
                "returns",
                "padding_mask",
                "padding_mask_p1",
            )
        }
        current["orders"], current["micro"] = [], []
        return out

    def permutation(n):
        order = original_permutation(n)
        current["orders"].append(torch.as_tensor(order.copy()))
        return order

    def micro_batch_loss(self, batch, index):
        loss, stats = original_loss(self, batch, index)
        current["micro"].append(
            {
                "index": torch.as_tensor(index.copy()),
                "loss": loss.detach().clone(),
                **{k: v.detach().clone() for k, v in stats.items()},
            }
        )
        return loss, stats

    def clip_gradients(self):
        norms = original_clip(self)
        current["micro"][-1].update({k: v.detach().clone().reshape(()) for k, v in norms.items()})
        return norms

    def update_metrics(self, batch, stats, warming_up):
        metrics = original_metrics(self, batch, stats, warming_up)
        current["metrics"] = copy.deepcopy(metrics)
        updates.append(dict(current))
        return metrics

    UnifiedPPOTrainer.advantages = advantages
    UnifiedPPOTrainer.micro_batch_loss = micro_batch_loss
    UnifiedPPOTrainer.clip_gradients = clip_gradients
    UnifiedPPOTrainer.update_metrics = update_metrics
    np.random.permutation = permutation
    try:
        trainer.train()
    finally:
        UnifiedPPOTrainer.advantages = original_advantages
        UnifiedPPOTrainer.micro_batch_loss = original_loss
        UnifiedPPOTrainer.clip_gradients = original_clip
        UnifiedPPOTrainer.update_metrics = original_metrics
        np.random.permutation = original_permutation
    return {"overrides": [*OVERRIDES, *extra], "updates": updates}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "ppo_parity.pt")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "ppo_parity")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    fixture = {
        "trl_version": __import__("trl").__version__,
        "torch_version": torch.__version__,
        "model_sha256": fingerprint(tiny_model_path()),
        "cases": {
            "default": record(args.work / "default", []),
            "variant": record(args.work / "variant", VARIANT),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out)
    for name, case in fixture["cases"].items():
        for number, update in enumerate(case["updates"], 1):
            m = update["metrics"]
            print(
                f"{name} update {number}: kl {m['objective/kl']:.3g} policy loss {m['loss/policy_avg']:.5g} "
                f"value loss {m['loss/value_avg']:.5g} ev {m['val/explained_variance']:.4g} "
                f"micro-batches {len(update['micro'])}"
            )
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run under `accelerate launch`: a short PPO run that records, on every rank, the gradient norms the
optimizer steps with (after our clipping), into `<output_dir>/norms-rank<N>.json`."""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import TrainerCallback

from llm_rl.algorithms.base import build_components
from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.recipe.load import load_recipe


def norm(module: torch.nn.Module) -> float:
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()


class RecordStepNorms(TrainerCallback):
    """Right before every optimizer step, the policy's and the critic's gradient norms."""

    def __init__(self) -> None:
        self.norms: list[list[float]] = []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        optimizer.optimizer.register_step_pre_hook(
            lambda *_: self.norms.append([norm(model.policy), norm(model.critic)])
        )


def main() -> None:
    recipe = load_recipe(sys.argv[1], sys.argv[2:])
    components = build_components(recipe)
    ppo.prepare(components)
    recorder = RecordStepNorms()
    trainer = ppo.build_trainer(components, [recorder])
    trainer.train()
    norms = recorder.norms
    logged = [row["grad_norm"] for row in trainer.state.log_history if "grad_norm" in row]
    rank = int(os.environ.get("RANK", "0"))
    out = {"world_size": trainer.accelerator.num_processes, "norms": norms, "logged_grad_norm": logged}
    (recipe.output_dir / f"norms-rank{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()

"""llm_rl's PPO replays two updates recorded from the TRL-based trainer it replaced (trl 1.12.0) and gets
the same advantages, returns, losses and gradient norms, within 1e-5 relative (CPU, fp32).

The fixture (tests/fixtures/ppo_parity.pt) was written by `scripts/record_ppo_parity.py` at the commit
that added it (e8b7d6a), seed 0: for each update, the rollout as TRL's loop produced it (token ids,
generation log-probs, reference log-probs, values, scores), the mini-batch orders it drew, and what its
maths made of them. Update 2 starts from the weights our own update 1 left, so it also checks that the
optimizer steps (two parameter groups, clipping apart) are TRL's.

The fixture carries the model it was recorded on (tests/fixtures/ppo_parity_model/), and the replay loads
that folder as `model.policy`: the embedded model (`builtin:tiny-arithmetic`) is built locally by a short
warm-up whose result is not bit-identical across CPUs, so a fixture recorded on one machine's build does
not replay on another's. To re-record, run that recorder at e8b7d6a (trl 1.12.0), changed to copy the
embedded model's folder beside the fixture and record with `model.policy=<that folder>` (the path is left
out of the fixture's overrides); the fixture and its model must be written together.

The recorded runs asked for `ppo.num_mini_batches: 2` with 4 micro-batches a rollout. TRL's loop
stepped the optimizer every `gradient_accumulation_steps` micro-batches whatever `num_mini_batches`
said, so it took one step per epoch; llm_rl takes one per mini-batch, as the key says. The replay
therefore runs with one mini-batch, which is what TRL did.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from llm_rl.algorithms.base import build_components
from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.rollout import Rollout, estimate_advantages, penalise_missing_stop
from llm_rl.models.completions import response_lengths
from llm_rl.recipe.load import load_recipe
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "ppo_parity.pt"
# The model the fixture was recorded on, saved beside it.
MODEL = REPO / "tests" / "fixtures" / "ppo_parity_model"
RELATIVE = 1e-5
# Quantities that are 0 up to rounding (a KL between two equal models) compare absolutely.
ABSOLUTE = 1e-7


@pytest.fixture(scope="module")
def fixture() -> dict:
    recorded = torch.load(FIXTURE, weights_only=False)
    digest = hashlib.sha256((MODEL / "model.safetensors").read_bytes()).hexdigest()
    assert digest == recorded["model_sha256"], (
        f"{MODEL.relative_to(REPO)}/model.safetensors (sha256 {digest[:12]}) is not the model "
        f"{FIXTURE.relative_to(REPO)} was recorded on ({recorded['model_sha256'][:12]}): "
        "the fixture and its model must be recorded together"
    )
    return recorded


def replay_trainer(case: dict, output_dir: Path) -> ppo.PPOTrainer:
    """Our trainer built from the recorded run's recipe and model, with TRL's effective mini-batching."""
    overrides = [o for o in case["overrides"] if not o.startswith(("ppo.num_mini_batches", "model.policy"))]
    recipe = load_recipe(
        REPO / "recipes" / "arithmetic" / "ppo.yaml",
        [*overrides, "ppo.num_mini_batches=1", f"model.policy={MODEL}", f"run.output_dir={output_dir}"],
    )
    components = build_components(recipe)
    trainer = ppo.build_trainer(components, [])
    trainer.init_state()
    trainer.prepare_for_training()
    return trainer


def recorded_rollout(inputs: dict, trainer: ppo.PPOTrainer) -> Rollout:
    """The recorded rollout in our form, penalties applied as our loop applies them."""
    context = inputs["context_length"]
    prompt_ids = inputs["query_responses"][:, :context]
    completion_ids = inputs["responses"]
    stops = trainer.rollouts.stop_token_ids
    lengths = response_lengths(completion_ids, stops)
    scores = penalise_missing_stop(
        inputs["scores"], completion_ids, lengths, stops, trainer.settings.missing_eos_penalty
    )
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_ids != trainer.sampling.pad_token_id,
        completion_ids=completion_ids,
        lengths=lengths,
        row_indices=torch.arange(len(prompt_ids)),
        logprobs=inputs["logprobs"],
        ref_logprobs=inputs["ref_logprobs"],
        values=inputs["values"],
        scores=scores,
        per_function=inputs["per_fn"],
    )


def close(ours: torch.Tensor, theirs: torch.Tensor, name: str) -> None:
    assert torch.allclose(ours.float(), theirs.float(), rtol=RELATIVE, atol=ABSOLUTE), (
        f"{name}: largest difference {(ours.float() - theirs.float()).abs().max().item():.3g}"
    )


@pytest.mark.parametrize("case_name", ["default", "variant"])
def test_two_recorded_updates_replay_to_the_same_numbers(
    fixture: dict, case_name: str, tmp_path: Path
) -> None:
    case = fixture["cases"][case_name]
    trainer = replay_trainer(case, tmp_path / "run")
    micro_losses: list[dict[str, torch.Tensor]] = []
    loss_of_micro_batch = trainer.micro_batch_loss

    def recording_loss(batch):
        loss, stats = loss_of_micro_batch(batch)
        micro_losses.append({"loss": loss.detach(), **stats})
        return loss, stats

    trainer.micro_batch_loss = recording_loss
    for number, update in enumerate(case["updates"], 1):
        inputs, outputs, metrics = update["inputs"], update["outputs"], update["metrics"]
        rollout = estimate_advantages(
            recorded_rollout(inputs, trainer), trainer.rollouts.advantage_settings()
        )

        # The rollout's maths: masks, scores, KL penalty, GAE.
        assert torch.equal(rollout.lengths, inputs["lengths"]), f"update {number}: lengths"
        assert torch.equal(rollout.response_mask, ~outputs["padding_mask"])
        assert torch.equal(rollout.value_mask, ~outputs["padding_mask_p1"])
        for ours, theirs in [
            ("scores", "scores"),
            ("values", "values"),
            ("kl", "kl"),
            ("kl_penalty", "non_score_reward"),
            ("advantages", "advantages"),
            ("returns", "returns"),
        ]:
            close(getattr(rollout, ours), outputs[theirs], f"update {number}: {ours}")
        close(rollout.kl.sum(1).mean(), torch.tensor(metrics["objective/kl"]), f"update {number}: kl")
        explained = core.explained_variance(rollout.values, rollout.returns, rollout.value_mask)
        close(
            explained, torch.tensor(metrics["val/explained_variance"]), f"update {number}: explained variance"
        )

        # The update: the same orders, so the same micro-batches, losses and gradient norms.
        micro_losses.clear()
        stats = trainer.train_on(rollout, update["orders"])
        recorded_micro = update["micro"]
        assert len(micro_losses) == len(recorded_micro)
        for index, (ours, theirs) in enumerate(zip(micro_losses, recorded_micro, strict=True)):
            for key in (
                "loss",
                "loss/policy_avg",
                "loss/value_avg",
                "policy/clipfrac_avg",
                "val/clipfrac_avg",
            ):
                close(ours[key], theirs[key], f"update {number}, micro-batch {index}: {key}")
        for key in ("loss/policy_avg", "loss/value_avg", "policy/clipfrac_avg", "val/clipfrac_avg"):
            close(stats[key], torch.tensor(metrics[key]), f"update {number}: {key}")
        for key in ("grad_norm", "value/grad_norm"):
            close(stats[key], torch.tensor(metrics[key]), f"update {number}: {key}")
        trainer.state.global_step += 1
        trainer.lr_scheduler.step()

"""A TRL PPO launch, converted by `llm-rl migrate`, reproduces what TRL 1.12's own script recorded.

`tests/fixtures/trl_ppo_parity/trl_run.pt` was written by `scripts/record_trl_ppo_parity.py` in an
environment with trl==1.12.0: TRL's `examples/scripts/ppo/ppo.py`, unchanged, launched with the command
stored in the fixture on the parity policy (`tests/fixtures/ppo_parity_model`) and a tiny reward model
sharing its tokenizer (`trl_ppo_parity/reward_model`), CPU, fp32. Two updates, four PPO epochs each.

Here that same command goes through `llm-rl migrate`, and the recipe it writes trains two updates with
nothing changed but the run folder. Sampling is the one step replayed: both sides sample with torch's
generator, but from different code, so the tokens TRL generated are handed to our loop in place of our
own; and TRL drew its shuffles from numpy's global generator, which its scripts never seeded (two TRL runs
of one command shuffle differently), so the orders TRL drew are handed over too. Everything else is
llm_rl's: the prompts tokenized from the dataset, the reward model's scores (`read: tokens`), the
missing-EOS penalty, the reference log-probs, the critic started from the reward model, KL, GAE, the
losses, the optimizer steps, the learning-rate schedule and the metrics.

Tolerance: 1e-5 relative or 1e-6 absolute, whichever is larger, for every number compared (rollout,
micro-batch losses and statistics, gradient norms, logged metrics, digests of the final weights). The
absolute term covers what is 0 up to rounding: the first update's KL between two equal models, and the
policy's log-probs of its own samples, which TRL took from the sampling pass (cached keys and values, one
token at a time) and llm_rl from a full forward pass (they differ by up to 5e-7). Measured on this
fixture, the largest relative differences are 3e-7 for the reference log-probs, 1e-7 for the losses, 5e-6
for the gradient norms; scores, values, advantages and returns agree exactly. The digests of the final
weights (sum, sum of squares, a fixed random projection of each tensor) allow 5e-5 absolute (see
FINAL_WEIGHTS); the largest seen is 5e-6.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from llm_rl.algorithms.base import build_components
from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.cli import main
from llm_rl.data.prompts import ROW_INDEX
from llm_rl.generation.sampling import Completions
from llm_rl.recipe.load import load_recipe
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures"
RECORDED = FIXTURES / "trl_ppo_parity" / "trl_run.pt"
MODELS = {
    "policy": FIXTURES / "ppo_parity_model",
    "reward_model": FIXTURES / "trl_ppo_parity" / "reward_model",
}
RELATIVE = 1e-5
# Quantities that are 0 up to rounding (a KL between two equal models) compare absolutely.
ABSOLUTE = 1e-6
# The final weights' digests (sums over a tensor) allow more: Adam divides each gradient by its own running
# size, so an element whose gradient is ~0 moves by up to the learning rate whichever way rounding tips it.
FINAL_WEIGHTS = 5e-5


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    run = torch.load(RECORDED, weights_only=False)
    for name, folder in MODELS.items():
        digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        assert digest == run["model_sha256"][name], (
            f"{folder.relative_to(REPO)} is not the model {RECORDED.relative_to(REPO)} was recorded on: "
            "the fixture and its models must be recorded together"
        )
    return run


class ReplayedSampling:
    """A generator that answers each rollout with the completions TRL sampled for it."""

    def __init__(self, completions: list[torch.Tensor]) -> None:
        self.completions = iter(completions)

    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> Completions:
        return Completions(next(self.completions))

    def weights_updated(self) -> None:
        pass


def without_trls_pad(ids: torch.Tensor, trl_pad: int, pad: int) -> torch.Tensor:
    """TRL's scripts padded with a `[PAD]` token they added to the tokenizer; llm_rl pads with the
    tokenizer's own. Padding is never read by either model, so this only renames it."""
    return ids.masked_fill(ids == trl_pad, pad)


def recorded_batches(recorded: dict[str, Any], trainer: ppo.PPOTrainer) -> list[dict[str, torch.Tensor]]:
    """TRL's prompt batches in our form, each query found among our tokenized prompts: our tokenization of
    the dataset must give TRL's token ids, or the lookup fails."""
    rows = {
        tuple(ids): row
        for ids, row in zip(trainer.train_dataset["input_ids"], trainer.train_dataset[ROW_INDEX], strict=True)
    }
    batches = []
    for update in recorded["updates"]:
        queries = update["queries"]
        mask = queries != recorded["pad_token_id"]
        ids = [tuple(query[keep].tolist()) for query, keep in zip(queries, mask, strict=True)]
        missing = [query for query in ids if query not in rows]
        assert not missing, f"TRL's queries {missing} are not our tokenization of any prompt"
        batches.append(
            {
                "input_ids": without_trls_pad(
                    queries, recorded["pad_token_id"], trainer.sampling.pad_token_id
                ),
                "attention_mask": mask.long(),
                ROW_INDEX: torch.tensor([rows[query] for query in ids]),
            }
        )
    return batches


def close(ours: torch.Tensor, theirs: torch.Tensor, name: str, atol: float = ABSOLUTE) -> float:
    """Assert agreement; return the largest relative difference, for the record."""
    ours, theirs = torch.as_tensor(ours).double(), torch.as_tensor(theirs).double()
    assert torch.allclose(ours, theirs, rtol=RELATIVE, atol=atol), (
        f"{name}: ours {ours.flatten()[:6].tolist()} vs TRL's {theirs.flatten()[:6].tolist()}, largest "
        f"difference {(ours - theirs).abs().max().item():.3g}"
    )
    return ((ours - theirs).abs() / theirs.abs().clamp(min=ABSOLUTE)).max().item()


@pytest.fixture(scope="module")
def replay(recorded: dict[str, Any], tmp_path_factory) -> dict[str, Any]:
    """The fixture's TRL launch converted by `llm-rl migrate` and trained two updates, with TRL's samples
    and shuffles replayed; what our loop computed along the way."""
    folder = tmp_path_factory.mktemp("trl_ppo_parity")
    launch = folder / "ppo.sh"
    launch.write_text(recorded["launch"].format(fixtures=FIXTURES, output=folder / "trl_output"))
    recipe_file = folder / "ppo.yaml"
    assert main(["migrate", str(launch), "-o", str(recipe_file)]) == 0
    recipe = load_recipe(
        recipe_file,
        [f"run.output_dir={folder / 'run'}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"],
    )
    trainer = ppo.build_trainer(build_components(recipe), [])
    pad = trainer.sampling.pad_token_id
    batches = recorded_batches(recorded, trainer)
    trainer.prompt_batches = lambda: iter(batches)
    trainer.rollouts.generator = ReplayedSampling(
        [
            without_trls_pad(update["responses"], recorded["pad_token_id"], pad)
            for update in recorded["updates"]
        ]
    )
    orders: Iterator[list[torch.Tensor]] = iter(update["orders"] for update in recorded["updates"])
    trainer.epoch_orders = lambda: next(orders)

    seen: dict[str, list] = {"rollouts": [], "micro": [], "norms": [], "metrics": []}
    rollout, micro_batch_loss = trainer.rollout, trainer.micro_batch_loss
    clip_gradients, update_metrics = trainer.clip_gradients, trainer.update_metrics

    def recording_rollout(batch):
        seen["rollouts"].append(rollout(batch))
        return seen["rollouts"][-1]

    def recording_loss(batch):
        loss, stats = micro_batch_loss(batch)
        seen["micro"].append({"loss": loss.detach(), **{k: v.detach() for k, v in stats.items()}})
        return loss, stats

    def recording_norms():
        seen["norms"].append(clip_gradients())
        return seen["norms"][-1]

    def recording_metrics(rollout, stats, warming_up):
        seen["metrics"].append(update_metrics(rollout, stats, warming_up))
        return seen["metrics"][-1]

    trainer.rollout, trainer.micro_batch_loss = recording_rollout, recording_loss
    trainer.clip_gradients, trainer.update_metrics = recording_norms, recording_metrics
    trainer.train()
    return {"trainer": trainer, "recipe": recipe, **seen}


def test_the_converted_launch_is_the_run_trls_script_made(replay: dict[str, Any]) -> None:
    recipe = replay["recipe"]
    assert recipe.model.policy == str(MODELS["policy"])
    (reward,) = recipe.rewards
    assert reward.kwargs == {"path": str(MODELS["reward_model"]), "read": "tokens"}
    assert replay["trainer"].state.global_step == 2, "total_episodes 16 at 8 a rollout: two updates"
    # ppo.py trained on all but the last 100 of the dataset's 169 rows.
    assert recipe.data.split == "train[:-100]" and len(replay["trainer"].train_dataset) == 69


def test_each_rollout_scores_and_estimates_as_trls(recorded: dict[str, Any], replay: dict[str, Any]) -> None:
    for number, (ours, theirs) in enumerate(zip(replay["rollouts"], recorded["updates"], strict=True), 1):
        where = f"update {number}"
        assert torch.equal(ours.response_mask, ~theirs["padding_mask"]), f"{where}: response mask"
        assert torch.equal(ours.value_mask, ~theirs["padding_mask_p1"]), f"{where}: value mask"
        # The reward model's scores of the policy's tokens, less the missing-EOS penalty.
        close(ours.scores, theirs["scores"], f"{where}: scores")
        mask = ours.response_mask
        close(ours.ref_logprobs[mask], theirs["ref_logprobs"][mask], f"{where}: reference log-probs")
        close(ours.logprobs[mask], theirs["logprobs"][mask], f"{where}: log-probs")
        # The critic, started from the reward model, read at every response position.
        close(ours.values, theirs["values"], f"{where}: values")
        close(ours.kl[mask], theirs["kl"][mask], f"{where}: KL")
        for mine, trls in [
            ("kl_penalty", "non_score_reward"),
            ("advantages", "advantages"),
            ("returns", "returns"),
        ]:
            close(getattr(ours, mine), theirs[trls], f"{where}: {mine}")


def test_every_micro_batch_and_optimizer_step_is_trls(
    recorded: dict[str, Any], replay: dict[str, Any]
) -> None:
    theirs_micro = [micro for update in recorded["updates"] for micro in update["micro"]]
    theirs_norms = [norms for update in recorded["updates"] for norms in update["norms"]]
    assert len(replay["micro"]) == len(theirs_micro) == 16
    masks = [~update["padding_mask"] for update in recorded["updates"] for _ in update["micro"]]
    for index, (ours, theirs, mask) in enumerate(zip(replay["micro"], theirs_micro, masks, strict=True)):
        where = f"micro-batch {index + 1}"
        for mine, trls in [
            ("loss", "loss"),
            ("loss/policy_avg", "pg_loss"),
            ("loss/value_avg", "vf_loss"),
            ("policy/clipfrac_avg", "pg_clipfrac"),
            ("val/clipfrac_avg", "vf_clipfrac"),
        ]:
            close(ours[mine], theirs[trls], f"{where}: {mine}")
        # TRL averaged these two over every position, padding included (log-ratio 0, ratio 1 there);
        # llm_rl over the response's tokens. The same numbers, weighed by the share of real tokens.
        share = mask[theirs["index"]].float().mean()
        close(ours["policy/approxkl_avg"] * share, theirs["approxkl"], f"{where}: approxkl")
        close(ours["val/ratio"] * share + (1 - share), theirs["ratio"], f"{where}: ratio")
    assert len(replay["norms"]) == len(theirs_norms) == 8, "one optimizer step per PPO epoch"
    for index, (ours, theirs) in enumerate(zip(replay["norms"], theirs_norms, strict=True)):
        for name in ("grad_norm", "value/grad_norm"):
            close(ours[name], theirs[name], f"step {index + 1}: {name}")


def test_the_logged_metrics_and_final_weights_are_trls(
    recorded: dict[str, Any], replay: dict[str, Any]
) -> None:
    for number, (ours, theirs) in enumerate(zip(replay["metrics"], recorded["metrics"], strict=True), 1):
        for name in (
            "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
            "objective/scores", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
            "val/clipfrac_avg", "lr",
        ):  # fmt: skip
            close(torch.tensor(ours[name]), torch.tensor(theirs[name]), f"update {number}: {name}")
    trainer = replay["trainer"]
    for model, name in ((trainer.model.policy, "policy"), (trainer.model.critic, "value_model")):
        theirs = recorded["final_weights"][name]
        probe = torch.Generator().manual_seed(0)
        for parameter, value in model.named_parameters():
            flat = value.detach().double().flatten()
            weights = torch.randn(flat.numel(), generator=probe, dtype=torch.float64)
            ours = torch.stack([flat.sum(), (flat * flat).sum(), (flat * weights).sum()])
            close(ours, theirs[parameter], f"final {name} {parameter}", atol=FINAL_WEIGHTS)

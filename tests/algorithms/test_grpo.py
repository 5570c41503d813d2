"""GRPO end to end through the real entry points, TRL's GRPOTrainer and the tiny embedded model."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

from llm_rl.algorithms.grpo import GRPO
from llm_rl.recipe.load import load_recipe
from tests.conftest import REPO, run_entry

GRPO_ONLY_KEYS = {"reward/group_std", "reward/frac_zero_std"}
ROW_KEYS = {
    "step",
    "samples",
    "reward/mean",
    "reward/std",
    "rewards/accuracy/mean",
    "rewards/format/mean",
    "grad_norm",
    "loss/policy",
    "learning_rate",
    "completion_length/mean",
    "samples_per_second",
    "peak_memory_mb",
} | GRPO_ONLY_KEYS


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default, 4 updates, through `recipes/grpo.py` with no recipe file."""
    output = tmp_path_factory.mktemp("grpo") / "run"
    result = run_entry(
        [
            "recipes/grpo.py",
            "--set",
            "training.max_steps=4",
            "--set",
            f"run.output_dir={output}",
            "--set",
            "checkpointing.every=2",
            "--set",
            "checkpointing.unit=steps",
            "--set",
            "monitoring.wandb.mode=offline",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return output


def test_demo_writes_the_run_folder(demo_run: Path) -> None:
    for name in (
        "recipe.yaml",
        "metrics.jsonl",
        "run_summary.json",
        "final/config.json",
        "final/tokenizer.json",
    ):
        assert (demo_run / name).exists(), name
    summary = json.loads((demo_run / "run_summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["algorithm"] == "grpo"
    assert summary["steps"] == 4
    assert summary["samples"] == 4 * 64
    assert summary["final_reward"] is not None
    assert summary["best_reward"] >= summary["final_reward"]


def test_demo_metrics_rows_carry_the_unified_keys(demo_run: Path) -> None:
    rows = read_jsonl(demo_run / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["samples"] for row in rows] == [64, 128, 192, 256]
    for row in rows:
        assert row.keys() >= ROW_KEYS, ROW_KEYS - row.keys()
        assert 0.0 <= row["reward/mean"] <= 1.1
        assert row["grad_norm"] >= 0.0


def test_demo_checkpoints_are_named_by_samples(demo_run: Path) -> None:
    names = sorted(p.name for p in demo_run.glob("checkpoint-*"))
    assert names == ["checkpoint-128", "checkpoint-256"]
    summary = json.loads((demo_run / "run_summary.json").read_text())
    assert [Path(p).name for p in summary["checkpoints"]] == names


def test_demo_resolved_recipe_is_written(demo_run: Path) -> None:
    recipe = load_recipe(demo_run / "recipe.yaml")
    assert recipe.algorithm == "grpo"
    assert recipe.training.max_steps == 4
    assert recipe.model.policy == "builtin:tiny-arithmetic"


def test_demo_wandb_offline_files(demo_run: Path) -> None:
    runs = list((demo_run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb")), "wandb wrote no run file"


def test_final_model_loads_and_generates(demo_run: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_run / "final")
    model = AutoModelForCausalLM.from_pretrained(demo_run / "final")
    ids = tokenizer("3+4=", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > ids.shape[1]


def test_accelerate_launch_runs_grpo(tmp_path: Path) -> None:
    result = run_entry(
        [
            "--num_processes",
            "1",
            "--cpu",
            "recipes/grpo.py",
            "--set",
            "training.max_steps=2",
            "--set",
            f"run.output_dir={tmp_path / 'run'}",
            "--set",
            "monitoring.wandb.mode=disabled",
        ],
        launcher=[str(Path(sys.executable).parent / "accelerate"), "launch"],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("completed", 2)


def test_grpo_section_reaches_trl_config(tmp_path: Path) -> None:
    recipe = load_recipe(
        REPO / "recipes" / "arithmetic" / "grpo.yaml",
        ["grpo.loss_type=grpo", "grpo.epsilon=0.3", "grpo.num_iterations=2", f"run.output_dir={tmp_path}"],
    )
    config = GRPO.trainer_config(recipe)
    assert (config.loss_type, config.epsilon, config.num_iterations) == ("grpo", 0.3, 2)
    assert config.max_completion_length == recipe.generation.max_new_tokens
    assert config.reward_weights == [1.0, 0.1]
    assert GRPO.samples_per_step(recipe) == 64 // 2


@pytest.mark.floors
def test_lora_policy_trains_and_saves_an_adapter(tmp_path: Path) -> None:
    result = run_entry(
        [
            "recipes/grpo.py",
            "--set",
            "training.max_steps=2",
            "--set",
            f"run.output_dir={tmp_path / 'run'}",
            "--set",
            "model.lora.enabled=true",
            "--set",
            "model.lora.r=4",
            "--set",
            "monitoring.wandb.mode=disabled",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "final" / "adapter_config.json").exists()


def test_tensorboard_gets_the_unified_metrics_against_samples(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = run_entry(
        [
            "recipes/grpo.py",
            "--set", "training.max_steps=2",
            "--set", f"run.output_dir={tmp_path / 'run'}",
            "--set", "monitoring.tensorboard=true",
            "--set", "monitoring.wandb.mode=disabled",
        ]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert {"reward/mean", "grad_norm", "loss/policy"} <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("reward/mean")] == [64, 128]


def test_router_loss_weight_on_a_dense_model_is_refused_before_training(tmp_path: Path) -> None:
    """A recipe from before TRL 1.14 may carry grpo.router_aux_loss_coef (then 0.001 by default and ignored
    for dense models); TRL now stops on it, so validation says so first, naming the key."""
    llm_rl = str(Path(sys.executable).parent / "llm-rl")
    result = run_entry(
        ["validate", str(REPO / "recipes" / "arithmetic" / "grpo.yaml"), "--set", "grpo.router_aux_loss_coef=0.001",
         "--set", f"run.output_dir={tmp_path / 'run'}"],
        launcher=[llm_rl], timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        "grpo.router_aux_loss_coef is 0.001, but LlamaForCausalLM is not a Mixture-of-Experts"
        in result.stderr
    )
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------------
# Advantage normalisation, in our words, onto TRL's config
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("choice", ["group", "batch", "none"])
def test_grpo_normalisation_reaches_trl(choice: str) -> None:

    recipe = load_recipe(REPO / "recipes" / "arithmetic" / "grpo.yaml", [f"advantages.normalize={choice}"])
    assert GRPO.trainer_config(recipe).scale_rewards == choice


# --- generation backends: how completions are generated, never what ---

RECORDED: list[list[str]] = []


def recorded_completions(completions: list[str], **kwargs) -> list[float]:
    """A reward that keeps every batch of completions it is given, for the backend tests; it scores 0."""
    RECORDED.append(list(completions))
    return [0.0] * len(completions)


def completions_of_run(output: Path, backend: str, *overrides: str) -> list[str]:
    """Every completion two GRPO updates of the embedded recipe generated with `backend`."""
    from tests.conftest import short_grpo_run

    RECORDED.clear()
    rewards = "[{name: accuracy, mode: exact}, {name: 'tests.algorithms.test_grpo:recorded_completions'}]"
    short_grpo_run(output / backend, f"generation.backend={backend}", f"rewards={rewards}", *overrides)
    return [completion for batch in RECORDED for completion in batch]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["static", "paged"])
def test_greedy_completions_are_the_same_with_every_backend(tmp_path: Path, backend: str) -> None:
    """top_k 1 samples the argmax: the backend must not change a single completion."""
    import torch._dynamo

    torch._dynamo.reset()
    greedy = ("generation.top_k=1", "generation.max_new_tokens=6")
    plain = completions_of_run(tmp_path, "hf", *greedy)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    other = completions_of_run(tmp_path, backend, *greedy)
    assert len(plain) == 2 * 16 and other == plain
    if backend == "static":
        compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs
        assert compiled > 0, "static generation compiled nothing"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["static", "paged"])
def test_sampled_completions_match_in_length_and_reward_with_every_backend(
    tmp_path: Path, backend: str
) -> None:
    """Sampling at temperature 1: mean length and exact-match rate agree within noise (128 samples a side)."""
    sampled = ("training.per_device_batch_size=64", "generation.max_new_tokens=6")
    statistics = {}
    for name in ("hf", backend):
        completions = completions_of_run(tmp_path, name, *sampled)
        rewards = [
            json.loads(line)["rewards/accuracy/mean"] for line in (tmp_path / name / "metrics.jsonl").open()
        ]
        statistics[name] = (sum(map(len, completions)) / len(completions), sum(rewards) / len(rewards))
    (hf_length, hf_reward), (other_length, other_reward) = statistics["hf"], statistics[backend]
    assert abs(hf_length - other_length) < 0.5, statistics
    # Two means of 128 Bernoulli draws differ by at most about 0.06 x 4 unless the distribution changed.
    assert abs(hf_reward - other_reward) < 0.25, statistics


@pytest.mark.parametrize(
    ("backend", "fields"),
    [
        ("static", {"cache_implementation": "static", "use_transformers_continuous_batching": False}),
        ("paged", {"cache_implementation": None, "use_transformers_continuous_batching": True}),
        ("hf", {"cache_implementation": None, "use_transformers_continuous_batching": False}),
    ],
)
def test_generation_backend_reaches_trl(tmp_path: Path, backend: str, fields: dict) -> None:
    recipe = load_recipe(
        REPO / "recipes" / "arithmetic" / "grpo.yaml",
        [f"generation.backend={backend}", "generation.batch_size=128", f"run.output_dir={tmp_path}"],
    )
    config = GRPO.trainer_config(recipe)
    assert {key: getattr(config, key) for key in fields} == fields
    # generation.batch_size is TRL's generation batch per process: two micro-batches of 64 per generation.
    assert (config.generation_batch_size, config.steps_per_generation) == (128, 2)


def test_paged_cache_is_sized_to_the_generation_batch(tmp_path: Path) -> None:
    """TRL would size it to half the free memory: on a CPU, half the host's RAM."""
    from llm_rl.algorithms.base import build_components

    def paged_cache(*overrides: str):
        paged = ["generation.backend=paged", "training.per_device_batch_size=16", "generation.batch_size=32"]
        paged.append(f"run.output_dir={tmp_path}")
        recipe = load_recipe(REPO / "recipes" / "arithmetic" / "grpo.yaml", [*paged, *overrides])
        return GRPO.build_trainer(build_components(recipe), []).continuous_batching_config

    cache = paged_cache()
    # 32 sequences of at most a page each (arithmetic prompts are a few tokens long).
    assert (cache.num_blocks, cache.max_requests_per_batch) == (32, 32)
    # With a prompt limit of more than a page, two pages each.
    assert paged_cache("data.max_prompt_length=300").num_blocks == 64


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["generation.batch_size=96"],
            "generation.batch_size (96) must be a multiple of training.per_device_batch_size",
        ),
        (
            ["generation.batch_size=128", "grpo.steps_per_generation=2"],
            "generation.batch_size and grpo.steps_per_generation",
        ),
        (
            ["generation.backend=static", "grpo.cache_implementation=static"],
            "generation.backend and grpo.cache_implementation",
        ),
    ],
)
def test_generation_keys_that_conflict_are_refused(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    from llm_rl.errors import RecipeError

    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe(REPO / "recipes" / "arithmetic" / "grpo.yaml", [*overrides, f"run.output_dir={tmp_path}"])


# --- the groups' spread when a reward leaves completions unscored ---

SCORED: list[list[float | None]] = []


def first_group_unscored(completions: list[str], **kwargs) -> list[float | None]:
    """None for each call's first 4 completions (one whole group), the completion's length otherwise."""
    values = [None] * 4 + [float(len(completion)) for completion in completions[4:]]
    SCORED.append(values)
    return values


def test_group_spread_leaves_out_a_group_no_reward_scored(tmp_path: Path) -> None:
    """A real run where one group a rollout is unscored: `reward/group_std` is the mean spread of the
    other groups, as TRL leaves unscored completions out of the baseline, and never NaN."""
    from tests.conftest import short_grpo_run

    SCORED.clear()
    reward = "[{name: 'tests.algorithms.test_grpo:first_group_unscored', on_invalid: skip}]"
    short_grpo_run(tmp_path, f"rewards={reward}", "evaluation.every=null", "evaluation.at_start=false")
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    training = [row["reward/group_std"] for row in logged if "reward/group_std" in row]
    assert len(SCORED) == len(training) == 2
    for values, spread in zip(SCORED, training, strict=True):
        groups = [values[start : start + 4] for start in range(4, len(values), 4)]
        expected = sum(statistics.pstdev(group) for group in groups) / len(groups)
        assert spread == pytest.approx(expected, rel=1e-5)
    # Counting the unscored group as a spread of 0 would give another number: the groups do spread.
    assert max(training) > 0

"""The held-out reward (evaluation.every): what scoring greedy completions directly gives, every prompt once
over two processes, and bad settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, entry, in_process_recipe, rows, run_entry


def test_held_out_reward_matches_scoring_greedy_completions_directly(tmp_path: Path) -> None:
    from accelerate import Accelerator

    from llm_rl.algorithms.base import build_components
    from llm_rl.training.evaluation import held_out_reward

    recipe = in_process_recipe("ppo", tmp_path / "run", "evaluation.every=1", "data.arithmetic.num_eval=9",
                               "evaluation.batch_size=4")  # fmt: skip
    components = build_components(recipe)
    evaluate = held_out_reward(components)
    metrics = evaluate(components.policy, Accelerator())
    assert metrics["eval/num_prompts"] == 9
    assert metrics == evaluate(components.policy, Accelerator()), "greedy: the same numbers twice"

    tokenizer, rows = components.tokenizer, components.data.eval
    completions = []
    for prompt in rows["prompt"]:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]  # with BOS, as the policy is prompted
        out = components.policy.generate(ids, max_new_tokens=recipe.generation.max_new_tokens, do_sample=False,
                                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        completions.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    columns = {key: list(rows[key]) for key in rows.column_names if key != "prompt"}
    direct = [
        sum(w * v for w, v in zip(components.rewards.weights, sample, strict=True))
        for sample in zip(
            *(
                f(prompts=list(rows["prompt"]), completions=completions, **columns)
                for f in components.rewards.functions
            ),
            strict=True,
        )  # fmt: skip
    ]
    assert metrics["eval/reward/mean"] == pytest.approx(sum(direct) / len(direct))


def test_held_out_reward_in_two_processes_covers_every_prompt_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = str(REPO / "accelerate_configs" / "cpu_ddp_2proc.yaml")
    launcher = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", config]
    result = run_entry(entry("ppo", run, "training.max_steps=2", "evaluation.every=2", "data.arithmetic.num_eval=7",
                             "evaluation.batch_size=2"), launcher=launcher)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    logged = rows(run)
    assert [row["step"] for row in logged] == [1, 2]
    assert logged[1]["eval/num_prompts"] == 7 and "eval/reward/mean" not in logged[0]


BAD_EVALUATION = {
    "eval metric without evaluation": (
        ["early_stopping.enabled=true", "early_stopping.metric=eval/reward/mean"],
        "evaluation.every is not set",
    ),
    "evaluation between logged rows": (["training.logging_steps=2", "evaluation.every=3"], "multiple of"),
    "no eval prompts": (["evaluation.every=2", "data.arithmetic.num_eval=0"], "no eval prompts"),
}


@pytest.mark.parametrize("case", list(BAD_EVALUATION))
def test_bad_evaluation_settings_exit_2(tmp_path: Path, case: str) -> None:
    overrides, expected = BAD_EVALUATION[case]
    result = run_entry(entry("grpo", tmp_path / "run", *overrides))
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_evaluation_at_start_logs_the_starting_policy_as_step_0(algorithm: str, tmp_path: Path) -> None:
    from llm_rl.run.training import train

    run = tmp_path / "run"
    recipe = in_process_recipe(algorithm, run, "training.max_steps=2", "evaluation.every=2",
                               "evaluation.at_start=true", "data.arithmetic.num_eval=6")  # fmt: skip
    train(recipe)
    logged = rows(run)
    assert [row["step"] for row in logged] == [0, 1, 2]
    start = logged[0]
    assert start["samples"] == 0 and start["eval/num_prompts"] == 6
    assert start["samples_per_second"] is None, "no sample consumed: no rate"
    assert "reward/mean" not in start, "the start row holds the evaluation alone"
    assert "eval/reward/mean" not in logged[1] and logged[2]["eval/num_prompts"] == 6
    assert logged[1]["samples_per_second"] > 0


def test_evaluation_at_start_alone_evaluates_once_and_not_on_resume(tmp_path: Path) -> None:
    from llm_rl.run.training import train

    run = tmp_path / "run"
    overrides = ["evaluation.at_start=true", "data.arithmetic.num_eval=4", "checkpointing.every=1",
                 "checkpointing.unit=steps"]  # fmt: skip
    train(in_process_recipe("ppo", run, "training.max_steps=1", *overrides))
    assert [(row["step"], "eval/reward/mean" in row) for row in rows(run)] == [(0, True), (1, False)]
    train(in_process_recipe("ppo", run, "training.max_steps=2", *overrides))
    assert [(row["step"], "eval/reward/mean" in row) for row in rows(run)] == [
        (0, True),
        (1, False),
        (2, False),
    ]

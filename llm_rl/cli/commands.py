"""What each `llm-rl` sub-command does once its flags are read (all but `serve`, in `serve.py`).

Each handler takes the parsed flags and returns an exit code; the libraries it needs are imported
inside it, so that the command line loads only what the one command asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from llm_rl.cli.exit_codes import EXIT_OK, EXIT_PREEMPTED


def command_train(args: argparse.Namespace) -> int:
    """Train a recipe and print where its run folder is."""
    from llm_rl.recipe.load import load_recipe
    from llm_rl.run.training import train
    from llm_rl.training.args import is_main_process
    from llm_rl.training.process_end import leave_run

    recipe = load_recipe(args.recipe, args.overrides)
    summary = train(recipe)
    if is_main_process():
        print(
            f"{summary['status']}: {summary['steps']} steps, {summary['samples']} samples, "
            f"final reward {summary['final_reward']}, run folder {recipe.output_dir}"
        )
    return leave_run(EXIT_PREEMPTED if summary["status"] == "preempted" else EXIT_OK)


def command_validate(args: argparse.Namespace) -> int:
    """Check recipe, dataset, rewards and model without training, and print what would run."""
    from llm_rl.recipe.load import load_recipe
    from llm_rl.tools.validate import describe_run

    recipe = load_recipe(args.recipe, args.overrides)
    print(describe_run(recipe))
    return EXIT_OK


def command_plan(args: argparse.Namespace) -> int:
    """Estimate per-GPU memory under DDP and each ZeRO stage from the model configs, and recommend one."""
    from llm_rl.recipe.load import load_recipe
    from llm_rl.tools.plan import algorithm_comparison, describe_plan, plan

    # For the GPUs the run will have: this host need not run the recipe's generation backend.
    recipe = load_recipe(args.recipe, args.overrides, on_this_host=False)
    result = plan(recipe, args.gpus, args.gpu_memory)
    print(describe_plan(result))
    print(algorithm_comparison(recipe, result))
    return EXIT_OK


def command_rollback(args: argparse.Namespace) -> int:
    """Make an earlier checkpoint the one the next run resumes from."""
    from llm_rl.training.checkpoints import rollback

    target, aside = rollback(args.run_dir, args.to, args.best)
    print(f"the next run of {args.run_dir} resumes from {target.name}")
    if aside is not None:
        print(f"later checkpoints, final/, the summary and a copy of metrics.jsonl are in {aside}")
    return EXIT_OK


def command_migrate(args: argparse.Namespace) -> int:
    """Convert a GRPO recipe (ours or a flat TRL-style YAML) to PPO, or back, and print what became of each key."""
    from llm_rl.recipe.migration import migrate, write_recipe

    migration = migrate(args.recipe, args.to, args.warm_start, args.processes, args.command, args.overrides)
    write_recipe(migration, args.recipe, args.output, args.to)
    print(migration.table())
    if migration.warnings:
        keys = ", ".join(row.source for row in migration.warnings)
        print(
            f"warning: no {args.to.upper()} counterpart or not used (marked ! above): {keys}", file=sys.stderr
        )
    print(f"wrote {args.output}; check it with: llm-rl validate {args.output}")
    return EXIT_OK


def command_doctor(args: argparse.Namespace) -> int:
    """Report what a run's metrics say went wrong, with the evidence and the change to try."""
    from llm_rl.tools.doctor import describe, diagnose

    findings, rows = diagnose(args.run_dir)
    print(describe(findings, rows))
    return EXIT_OK


def command_export(args: argparse.Namespace) -> int:
    """Write a run's policy as a save_pretrained folder for inference engines."""
    from llm_rl.tools.export import export_policy

    print(f"wrote {export_policy(args.run_dir, args.output, args.dtype, args.merge_lora)}")
    return EXIT_OK


def command_sample(args: argparse.Namespace) -> int:
    """Print completions for a prompts file, each with the run's rewards."""
    # Libraries print on import and load (transformers, under WANDB_MODE=offline): stdout is ours alone.
    with contextlib.redirect_stdout(sys.stderr):
        from llm_rl.tools.sample import print_samples, sample_file

        results = sample_file(args.run_dir, args.prompts, args.greedy, args.max_new_tokens, args.backend)
    print_samples(results, args.json)
    return EXIT_OK


def command_compare(args: argparse.Namespace) -> int:
    """Compare run folders: plots and a table in REPORT_DIR/report.md; print the table."""
    from llm_rl.tools.compare import compare_runs

    table, report = compare_runs(args.run_dirs, args.output)
    print(table)
    print(f"report: {report}")
    return EXIT_OK


def command_train_reward_model(args: argparse.Namespace) -> int:
    """Train a reward model and print its held-out pairwise accuracy and folder."""
    from llm_rl.reward_model.train import load_reward_recipe, train_reward_model
    from llm_rl.training.args import is_main_process
    from llm_rl.training.process_end import leave_run

    recipe = load_reward_recipe(args.recipe, args.overrides)
    summary = train_reward_model(recipe)
    if is_main_process():
        print(
            f"held-out pairwise accuracy {summary['held_out_pairwise_accuracy']:.3f} on "
            f"{summary['held_out_pairs']} pairs; reward model in {summary['final']} "
            f"(rewards: [{{name: reward_model, path: {summary['final']}}}])"
        )
    return leave_run(EXIT_OK)

"""The command line: `llm-rl train|validate|plan|rollback|migrate|compare|doctor|export|sample|serve`, and the
`recipes/<algorithm>.py` entry points.

Exit codes (DESIGN.md): 0 success; 2 bad input, with one message on stderr and no traceback unless
`--debug`; 1 a failure while training.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from llm_rl.errors import TrainingFailure, UserInputError

if TYPE_CHECKING:
    from llm_rl.tools.serve.limits import ServeLimits

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# A run stopped by SIGTERM or SIGUSR1 after its checkpoint (EX_TEMPFAIL: the same command resumes it).
EXIT_PREEMPTED = 75
API_KEY_VARIABLE = "LLM_RL_API_KEY"

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def add_recipe_arguments(parser: argparse.ArgumentParser, recipe_positional: bool) -> None:
    """The recipe path, `--set` overrides and `--debug`, shared by every command that reads a recipe."""
    if recipe_positional:
        parser.add_argument("recipe", type=Path, help="the recipe YAML file")
    else:
        parser.add_argument("--config", dest="recipe", type=Path, help="the recipe YAML file")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key, e.g. --set training.max_steps=10 (the value is parsed as YAML)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


def guarded(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command, turning errors into the documented exit codes and one line on stderr."""
    from llm_rl.monitoring.progress import bars_wanted, without_bars

    if not bars_wanted(True):  # output to a file or a pipe: the lines without the libraries' bars
        without_bars()
    try:
        return command(args)
    except UserInputError as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED
    except TrainingFailure as err:
        if args.debug:
            raise
        print(f"training failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:
        if args.debug:
            raise
        print(
            f"training failed: {type(err).__name__}: {err} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def command_train(args: argparse.Namespace) -> int:
    """Train a recipe and print where its run folder is."""
    from llm_rl.recipe.load import load_recipe
    from llm_rl.run.training import train
    from llm_rl.training.args import end_processes, is_main_process

    recipe = load_recipe(args.recipe, args.overrides)
    summary = train(recipe)
    end_processes()
    if is_main_process():
        print(
            f"{summary['status']}: {summary['steps']} steps, {summary['samples']} samples, "
            f"final reward {summary['final_reward']}, run folder {recipe.output_dir}"
        )
    return EXIT_PREEMPTED if summary["status"] == "preempted" else EXIT_OK


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


def command_serve(args: argparse.Namespace) -> int:
    """Serve a trained policy over HTTP until interrupted: llm-rl's FastAPI server (OpenAI's API and
    /generate), or vLLM's own OpenAI-compatible server (`--backend vllm`, or `auto` for a run trained on vLLM)."""
    # Libraries print on import and load (transformers, under WANDB_MODE=offline): stdout is the one
    # "serving ... on http://HOST:PORT" line alone.
    with contextlib.redirect_stdout(sys.stderr):
        from llm_rl.tools.serve import ServeLimits, serve_backend
        from llm_rl.tools.serve.vllm_server import refuse_fastapi_limits

    limits = ServeLimits.from_flags(args)
    # The key from the flag or the environment; never printed.
    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    # The limit flags are checked first: before the policy, or vLLM, is looked for.
    if args.backend == "vllm":
        refuse_fastapi_limits(limits, "--backend vllm serves with vLLM's server")
    with contextlib.redirect_stdout(sys.stderr):
        backend = serve_backend(args.source, args.backend)
    if backend == "vllm":
        if args.backend == "auto":
            refuse_fastapi_limits(
                limits, "--backend auto serves this run, trained on vLLM, with vLLM's server"
            )
        return serve_with_vllm(args, limits, api_key)
    return serve_with_fastapi(args, limits, api_key, backend)


def serve_with_fastapi(
    args: argparse.Namespace, limits: ServeLimits, api_key: str | None, backend: str
) -> int:
    """llm-rl's FastAPI server, generating on `backend` (hf, static or paged)."""
    from llm_rl.tools.serve import make_server
    from llm_rl.tools.serve.server import serving_line

    try:
        with contextlib.redirect_stdout(sys.stderr):
            server = make_server(args.source, args.host, args.port, limits, api_key, args.model_name, backend)
    except OSError as err:
        raise UserInputError(f"--port {args.port}: cannot serve on {args.host}: {err.strerror}") from None
    host, port = server.server_address
    what = "OpenAI API under /v1, POST /generate, GET /health"
    print(serving_line(args.source, server.model_id, host, port, what, api_key), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def serve_with_vllm(args: argparse.Namespace, limits: ServeLimits, api_key: str | None) -> int:
    """vLLM's OpenAI-compatible server as a child process, until SIGINT or SIGTERM (exit 0); exit 1 when it
    exits by itself, at start-up or later."""
    from llm_rl.tools.serve.vllm_server import ServerExited, serve_on_vllm

    try:
        serve_on_vllm(args.source, args.host, args.port, limits.max_new_tokens, api_key, args.model_name)
    except ServerExited as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
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


def main(argv: Sequence[str] | None = None) -> int:
    """`llm-rl COMMAND ...`."""
    parser = argparse.ArgumentParser(prog="llm-rl", description="RL fine-tuning of LLMs with GRPO and PPO")
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser("train", help="train a recipe")
    add_recipe_arguments(train_parser, recipe_positional=True)
    train_parser.set_defaults(run=command_train)
    validate_parser = commands.add_parser("validate", help="check a recipe without training")
    add_recipe_arguments(validate_parser, recipe_positional=True)
    validate_parser.set_defaults(run=command_validate)
    plan_parser = commands.add_parser("plan", help="per-GPU memory and the accelerate config to use")
    add_recipe_arguments(plan_parser, recipe_positional=True)
    plan_parser.add_argument("--gpus", type=int, default=8, help="GPUs in the run (default 8)")
    plan_parser.add_argument(
        "--gpu-memory", type=float, default=80.0, metavar="GB", help="memory per GPU (default 80)"
    )
    plan_parser.set_defaults(run=command_plan)
    rollback_parser = commands.add_parser("rollback", help="resume a run from an earlier checkpoint")
    rollback_parser.add_argument("run_dir", type=Path, help="the run folder")
    which = rollback_parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--to", metavar="checkpoint-N", help="the checkpoint folder to go back to")
    which.add_argument("--best", action="store_true", help="the checkpoint with the best score")
    rollback_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    rollback_parser.set_defaults(run=command_rollback)
    migrate_parser = commands.add_parser(
        "migrate", help="convert a recipe to another algorithm (GRPO to PPO, ...)"
    )
    migrate_parser.add_argument(
        "recipe",
        type=Path,
        help="our recipe, a flat TRL-style GRPO YAML or JSON, or a shell file with a TRL GRPO launch command",
    )
    migrate_parser.add_argument(
        "--to",
        metavar="ALGORITHM",
        default="ppo",
        help="the target algorithm: grpo, ppo or rloo (default ppo)",
    )
    migrate_parser.add_argument("-o", "--output", type=Path, required=True, help="the recipe to write")
    migrate_parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a key of the result, e.g. --set ppo.advantage_estimator=group (repeatable; YAML value)",
    )
    migrate_parser.add_argument(
        "--warm-start",
        metavar="MODEL_DIR",
        help="start the policy from this folder (e.g. a GRPO run's final/)",
    )
    migrate_parser.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="check the result as a run of N processes (GPUs) would batch it; default: 1",
    )
    migrate_parser.add_argument(
        "--command",
        type=int,
        default=None,
        metavar="N",
        help="the N-th launch command (from 1) of a shell file that holds several",
    )
    migrate_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    migrate_parser.set_defaults(run=command_migrate)
    doctor_parser = commands.add_parser("doctor", help="diagnose a run from its metrics")
    doctor_parser.add_argument("run_dir", type=Path, help="the run folder")
    doctor_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    doctor_parser.set_defaults(run=command_doctor)
    export_parser = commands.add_parser("export", help="write the trained policy for inference engines")
    export_parser.add_argument("run_dir", type=Path, help="a run folder, its final/ or a checkpoint")
    export_parser.add_argument("-o", "--output", type=Path, required=True, help="the folder to write")
    export_parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    export_parser.add_argument("--merge-lora", action="store_true", help="fold a LoRA adapter into its base")
    export_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    export_parser.set_defaults(run=command_export)
    serve_parser = commands.add_parser(
        "serve",
        help="serve a trained policy over HTTP: OpenAI's API (/v1), on llm-rl's server or vLLM's",
        description=(
            "Serve a trained policy with OpenAI's API. On llm-rl's server (FastAPI + uvicorn; --backend hf, "
            "static or paged): POST /v1/completions, POST /v1/chat/completions (the run's chat template and "
            "system prompt), GET /v1/models (stream: true for server-sent events), POST /generate and GET "
            "/health; requests that arrive together are generated in one batch. With --backend vllm (auto "
            "for a run trained on vLLM, where vLLM is installed): vLLM's own OpenAI-compatible server, with "
            "the run's chat template and system prompt on chat, and none of the limit flags but "
            "--max-new-tokens. Exit 2 for a bad policy folder, a port in use or a flag the backend does "
            "not take; 1 when vLLM's server exits by itself."
        ),
    )
    serve_parser.add_argument(
        "source", type=Path, help="a run folder, its final/, a checkpoint or an adapter"
    )
    serve_parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    serve_parser.add_argument(
        "--host", default="127.0.0.1", help="default 127.0.0.1 (loopback); 0.0.0.0 for all interfaces"
    )
    serve_parser.add_argument(
        "--backend",
        choices=["auto", "hf", "static", "paged", "vllm"],
        default="auto",
        help="vllm: vLLM's own server; hf, static, paged: llm-rl's server generating with that backend "
        "(default auto: vllm for a run trained on vLLM where vLLM is installed, else hf)",
    )
    serve_parser.add_argument(
        "--api-key",
        help=f"require 'Authorization: Bearer KEY' (llm-rl's server: on every path but /health; vLLM's: under "
        f"/v1); or set {API_KEY_VARIABLE} (better: a flag shows in the process list)",
    )
    serve_parser.add_argument(
        "--model-name", help="the model id clients send (default: the run folder's name)"
    )
    serve_parser.add_argument(
        "--max-prompts", type=int, default=64, help="prompts x n per request (64; llm-rl's server only)"
    )
    serve_parser.add_argument(
        "--max-prompt-tokens", type=int, default=2048, help="tokens per prompt (2048; llm-rl's server only)"
    )
    serve_parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=512,
        help="the most max_tokens a request may ask (512; vLLM's server cuts a larger ask to it)",
    )
    serve_parser.add_argument(
        "--max-body-bytes", type=int, default=1 << 20, help="request body size (1 MiB; llm-rl's server only)"
    )
    serve_parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=10.0,
        help="how long a batch waits for more requests (10; llm-rl's server only)",
    )
    serve_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    serve_parser.set_defaults(run=command_serve)
    sample_parser = commands.add_parser("sample", help="completions for a prompts file, with their rewards")
    sample_parser.add_argument("run_dir", type=Path, help="a run folder, its final/ or a checkpoint")
    sample_parser.add_argument(
        "--prompts", type=Path, required=True, help="a jsonl/json/csv/parquet file in the run's data format"
    )
    sample_parser.add_argument("--greedy", action="store_true", help="greedy instead of the run's sampling")
    sample_parser.add_argument(
        "--max-new-tokens", type=int, help="default: the run's generation.max_new_tokens"
    )
    sample_parser.add_argument("--json", action="store_true", help="one JSON object per line")
    sample_parser.add_argument(
        "--backend",
        choices=["auto", "hf", "static", "paged", "vllm"],
        default="auto",
        help="the generation backend (default auto: the run's own where this host runs it, else hf)",
    )
    sample_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sample_parser.set_defaults(run=command_sample)
    compare_parser = commands.add_parser("compare", help="compare run folders: plots and a table")
    compare_parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders")
    compare_parser.add_argument("-o", "--output", type=Path, required=True, metavar="REPORT_DIR")
    compare_parser.add_argument("--debug", action="store_true", help="show tracebacks")
    compare_parser.set_defaults(run=command_compare)
    args = parser.parse_args(argv)
    return guarded(args.run, args)


def command_train_reward_model(args: argparse.Namespace) -> int:
    """Train a reward model and print its held-out pairwise accuracy and folder."""
    from llm_rl.reward_model.train import load_reward_recipe, train_reward_model
    from llm_rl.training.args import end_processes, is_main_process

    recipe = load_reward_recipe(args.recipe, args.overrides)
    summary = train_reward_model(recipe)
    end_processes()
    if is_main_process():
        print(
            f"held-out pairwise accuracy {summary['held_out_pairwise_accuracy']:.3f} on "
            f"{summary['held_out_pairs']} pairs; reward model in {summary['final']} "
            f"(rewards: [{{name: reward_model, path: {summary['final']}}}])"
        )
    return EXIT_OK


def reward_entry_point(default_config: Path, argv: Sequence[str] | None = None) -> int:
    """`reward_models/train.py [--config CONFIG] [--set k=v ...]`."""
    parser = argparse.ArgumentParser(
        prog="reward_models/train.py",
        description="Train a reward model with TRL's RewardTrainer; with no --config, the embedded default.",
    )
    add_recipe_arguments(parser, recipe_positional=False)
    args = parser.parse_args(argv)
    args.recipe = args.recipe or default_config
    return guarded(command_train_reward_model, args)


def entry_point(algorithm: str, default_recipe: Path, argv: Sequence[str] | None = None) -> int:
    """`recipes/<algorithm>.py [--config RECIPE] [--set k=v ...]`: the script decides the algorithm."""
    parser = argparse.ArgumentParser(
        prog=f"recipes/{algorithm}.py",
        description=f"Train with {algorithm.upper()}; with no --config, the embedded default recipe.",
    )
    add_recipe_arguments(parser, recipe_positional=False)
    args = parser.parse_args(argv)
    args.recipe = args.recipe or default_recipe
    args.overrides = [f"algorithm={algorithm}", *args.overrides]
    return guarded(command_train, args)


if __name__ == "__main__":
    sys.exit(main())

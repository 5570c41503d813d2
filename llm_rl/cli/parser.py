"""`llm-rl`'s flags: one function per sub-command adds its parser, with its handler as the `run` default."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from llm_rl.cli.commands import (
    command_compare,
    command_doctor,
    command_export,
    command_migrate,
    command_plan,
    command_rollback,
    command_sample,
    command_train,
    command_validate,
)
from llm_rl.cli.serve import API_KEY_VARIABLE, command_serve

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    """`llm-rl COMMAND ...`: the sub-commands in the order `--help` lists them."""
    parser = argparse.ArgumentParser(prog="llm-rl", description="RL fine-tuning of LLMs with GRPO and PPO")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in (
        add_train,
        add_validate,
        add_plan,
        add_rollback,
        add_migrate,
        add_doctor,
        add_export,
        add_serve,
        add_sample,
        add_compare,
    ):
        add_command(commands)
    return parser


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


def finish_command(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int]) -> None:
    """`--debug`, each command's last flag, and the handler its parsed flags go to as `run`."""
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.set_defaults(run=run)


def add_train(commands: Commands) -> None:
    """`llm-rl train RECIPE`."""
    train_parser = commands.add_parser("train", help="train a recipe")
    add_recipe_arguments(train_parser, recipe_positional=True)
    train_parser.set_defaults(run=command_train)


def add_validate(commands: Commands) -> None:
    """`llm-rl validate RECIPE`."""
    validate_parser = commands.add_parser("validate", help="check a recipe without training")
    add_recipe_arguments(validate_parser, recipe_positional=True)
    validate_parser.set_defaults(run=command_validate)


def add_plan(commands: Commands) -> None:
    """`llm-rl plan RECIPE [--gpus N] [--gpu-memory GB]`."""
    plan_parser = commands.add_parser("plan", help="per-GPU memory and the accelerate config to use")
    add_recipe_arguments(plan_parser, recipe_positional=True)
    plan_parser.add_argument("--gpus", type=int, default=8, help="GPUs in the run (default 8)")
    plan_parser.add_argument(
        "--gpu-memory", type=float, default=80.0, metavar="GB", help="memory per GPU (default 80)"
    )
    plan_parser.set_defaults(run=command_plan)


def add_rollback(commands: Commands) -> None:
    """`llm-rl rollback RUN_DIR --to checkpoint-N | --best`."""
    rollback_parser = commands.add_parser("rollback", help="resume a run from an earlier checkpoint")
    rollback_parser.add_argument("run_dir", type=Path, help="the run folder")
    which = rollback_parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--to", metavar="checkpoint-N", help="the checkpoint folder to go back to")
    which.add_argument("--best", action="store_true", help="the checkpoint with the best score")
    finish_command(rollback_parser, command_rollback)


def add_migrate(commands: Commands) -> None:
    """`llm-rl migrate RECIPE -o OUTPUT [--to ALGORITHM] ...`."""
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
    finish_command(migrate_parser, command_migrate)


def add_doctor(commands: Commands) -> None:
    """`llm-rl doctor RUN_DIR`."""
    doctor_parser = commands.add_parser("doctor", help="diagnose a run from its metrics")
    doctor_parser.add_argument("run_dir", type=Path, help="the run folder")
    finish_command(doctor_parser, command_doctor)


def add_export(commands: Commands) -> None:
    """`llm-rl export RUN_DIR -o OUTPUT [--dtype D] [--merge-lora]`."""
    export_parser = commands.add_parser("export", help="write the trained policy for inference engines")
    export_parser.add_argument("run_dir", type=Path, help="a run folder, its final/ or a checkpoint")
    export_parser.add_argument("-o", "--output", type=Path, required=True, help="the folder to write")
    export_parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    export_parser.add_argument("--merge-lora", action="store_true", help="fold a LoRA adapter into its base")
    finish_command(export_parser, command_export)


def add_serve(commands: Commands) -> None:
    """`llm-rl serve SOURCE [--port N] [--backend B] [limits ...]`."""
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
    finish_command(serve_parser, command_serve)


def add_sample(commands: Commands) -> None:
    """`llm-rl sample RUN_DIR --prompts FILE [--greedy] [--json] ...`."""
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
    finish_command(sample_parser, command_sample)


def add_compare(commands: Commands) -> None:
    """`llm-rl compare RUN_DIR ... -o REPORT_DIR`."""
    compare_parser = commands.add_parser("compare", help="compare run folders: plots and a table")
    compare_parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders")
    compare_parser.add_argument("-o", "--output", type=Path, required=True, metavar="REPORT_DIR")
    finish_command(compare_parser, command_compare)

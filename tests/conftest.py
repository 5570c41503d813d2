"""Shared test set-up: offline hub and wandb, one tiny-model cache for the whole suite and its subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO.parent / "shared" / "data" / "gsm8k"
ARITHMETIC = REPO / "recipes" / "arithmetic"
LLM_RL = str(Path(sys.executable).parent / "llm-rl")
ALGORITHMS = ["grpo", "ppo", "rloo"]

os.environ.setdefault("LLM_RL_CACHE", str(REPO / ".pytest_cache" / "llm_rl"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def share_the_cores() -> None:
    """Under pytest-xdist, each worker, and every process its tests start, gets its share of the cores.

    torch's default, a thread per core in every process, oversubscribes them when workers run side by
    side, and OpenMP threads then spin waiting on each other: SmolLM2's runs took 7x their time alone.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


share_the_cores()


# `accelerate launch` on a port of this test worker's own (gw0: 29500, gw1: 29600, ...): test files run
# side by side, and two launches on one port collide, on the TCP port and on DeepSpeed's CPU
# shared-memory buffers, which are named after MASTER_PORT.
WORKER_INDEX = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
ACCELERATE_LAUNCH = [
    str(Path(sys.executable).parent / "accelerate"),
    "launch",
    "--main_process_port",
    str(29500 + 100 * WORKER_INDEX),
]


def run_entry(
    args: list[str], timeout: float = 300, launcher: list[str] | None = None
) -> subprocess.CompletedProcess:
    """Run a repo script (e.g. `recipes/grpo.py ...`) in a fresh process, as a user would."""
    command = (launcher or [sys.executable]) + args
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K / "test.jsonl").exists():
        pytest.skip(f"GSM8K data not found at {GSM8K}")
    return GSM8K


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` are skipped, with the reason, where torch sees no CUDA device; tests marked `vllm`
    where vLLM is not installed, unless `LLM_RL_REQUIRE_VLLM` is set (`make test-vllm`: there they run,
    and fail if vLLM is missing)."""
    import torch

    from llm_rl.generation.backends import vllm_problem

    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    if not os.environ.get("LLM_RL_REQUIRE_VLLM") and vllm_problem() is not None:
        skips["vllm"] = pytest.mark.skip(reason=f"{vllm_problem()}; `make test-vllm` runs these tests")
    for item in items:
        for marker, skip in skips.items():
            if marker in item.keywords:
                item.add_marker(skip)


CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory) -> Path:
    """A tiny LlamaForSequenceClassification with a WordLevel tokenizer of its own (not the policy's), saved."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForSequenceClassification, PreTrainedTokenizerFast

    corpus = ["user : what is 3 + 4 ?", "assistant : 7", "the answer is 7 because 3 plus 4 is 7", "good bad"]
    backend = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        eos_token="[EOS]",
        model_input_names=["input_ids", "attention_mask"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForSequenceClassification(config)
    folder = tmp_path_factory.mktemp("reward_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------------------------------
# Helpers shared by test files in several folders. llm_rl is imported inside them, not here: the
# environment above must be set before transformers is first imported.
# ----------------------------------------------------------------------------------------------------

# Small enough for a second or two per update on 2 CPU cores, for either algorithm.
SMALL = {
    "grpo": ["training.per_device_batch_size=16", "grpo.num_generations=4"],
    "ppo": ["training.per_device_batch_size=16"],
    "rloo": ["training.per_device_batch_size=16", "rloo.num_generations=4"],
}


def sets(*overrides: str) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def entry(algorithm: str, output: Path, *overrides: str) -> list[str]:
    """The command line of a small run of the embedded recipe through `recipes/<algorithm>.py`."""
    common = [f"run.output_dir={output}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"]
    return [f"recipes/{algorithm}.py", *sets(*common, *SMALL[algorithm], *overrides)]


def run_ok(algorithm: str, output: Path, *overrides: str) -> dict:
    result = run_entry(entry(algorithm, output, *overrides))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output / "run_summary.json").read_text())


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def in_process_recipe(algorithm: str, output: Path, *overrides: str):
    from llm_rl.recipe.load import load_recipe

    common = [f"run.output_dir={output}", "monitoring.wandb.mode=disabled", "monitoring.progress=false"]
    return load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml", [*common, *SMALL[algorithm], *overrides]
    )


def short_grpo_run(output: Path, *overrides: str) -> Path:
    """Two GRPO updates of the embedded recipe; returns the run's final/."""
    from llm_rl.recipe.load import load_recipe
    from llm_rl.run.training import train

    recipe = load_recipe(
        ARITHMETIC / "grpo.yaml",
        [
            f"run.output_dir={output}",
            "training.max_steps=2",
            "training.learning_rate=1e-3",
            "training.per_device_batch_size=16",
            "grpo.num_generations=4",
            "monitoring.wandb.mode=disabled",
            "monitoring.progress=false",
            *overrides,
        ],
    )
    assert train(recipe)["status"] == "completed"
    return output / "final"


def write(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def write_recipe(path: Path, **sections) -> Path:
    base = {
        "model": {"policy": "builtin:tiny-arithmetic"},
        "data": {"source": "builtin:arithmetic"},
        "rewards": [{"name": "accuracy", "mode": "exact"}],
        "training": {"max_steps": 1, "per_device_batch_size": 8},
        "grpo": {"num_generations": 4},
        "monitoring": {"wandb": {"mode": "disabled"}},
        "run": {"output_dir": str(path.parent / "run")},
    }
    base.update(sections)
    path.write_text(yaml.safe_dump(base))
    return path


@pytest.fixture
def deepspeed_launch(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The variables `accelerate launch` sets for a DeepSpeed config (read by accelerate's DeepSpeedPlugin)."""
    from llm_rl.training.args import DEEPSPEED_CLIPPING_VARIABLE

    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    # sync_deepspeed_clipping writes os.environ itself; setting the variable through monkeypatch first
    # records that it was absent, so that teardown removes whatever the test left there.
    monkeypatch.setenv(DEEPSPEED_CLIPPING_VARIABLE, "unset")
    monkeypatch.delenv(DEEPSPEED_CLIPPING_VARIABLE)
    return monkeypatch

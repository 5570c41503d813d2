"""DeepSpeed's gradient clipping kept in step with the recipe's `training.max_grad_norm`
(llm_rl.training.args.sync_deepspeed_clipping), under the variables `accelerate launch` sets."""

from __future__ import annotations

import os

import pytest
import torch

from llm_rl.errors import RecipeError
from llm_rl.generation.vllm_engine.engine import free_port
from llm_rl.training.args import DEEPSPEED_CLIPPING_VARIABLE, end_processes, sync_deepspeed_clipping


def test_unset_deepspeed_clipping_takes_the_recipe_value(deepspeed_launch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import DeepSpeedPlugin

    sync_deepspeed_clipping(0.25)
    assert DeepSpeedPlugin().deepspeed_config["gradient_clipping"] == 0.25
    deepspeed_launch.delenv(DEEPSPEED_CLIPPING_VARIABLE)
    sync_deepspeed_clipping(None)
    assert DeepSpeedPlugin().deepspeed_config["gradient_clipping"] == 0.0


def test_deepspeed_clipping_that_disagrees_is_an_error(deepspeed_launch: pytest.MonkeyPatch) -> None:
    deepspeed_launch.setenv(DEEPSPEED_CLIPPING_VARIABLE, "1.0")
    sync_deepspeed_clipping(1.0)
    with pytest.raises(RecipeError, match=r"training.max_grad_norm is 0.5 .* gradient_clipping: 1.0"):
        sync_deepspeed_clipping(0.5)
    with pytest.raises(RecipeError, match=r"is null \(no clipping\)"):
        sync_deepspeed_clipping(None)
    assert os.environ[DEEPSPEED_CLIPPING_VARIABLE] == "1.0"


def close_after_a_collective(rank: int, port: int, closed: torch.multiprocessing.SimpleQueue) -> None:
    """One of two gloo processes: gather once, end the run's processes, say whether the group is gone."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    gathered = [torch.zeros(1), torch.zeros(1)]
    torch.distributed.all_gather(gathered, torch.tensor([float(rank)]))
    end_processes()
    closed.put((rank, not torch.distributed.is_initialized()))


def test_a_finished_multi_process_run_closes_its_process_group() -> None:
    """Left open to interpreter exit, gloo's threads can abort a run that succeeded (exit -6)."""
    context = torch.multiprocessing.get_context("spawn")
    closed = context.SimpleQueue()
    torch.multiprocessing.start_processes(
        close_after_a_collective, args=(free_port(), closed), nprocs=2, start_method="spawn"
    )
    assert sorted(closed.get() for _ in range(2)) == [(0, True), (1, True)]

"""DeepSpeed's gradient clipping kept in step with the recipe's `training.max_grad_norm`
(llm_rl.training.args.sync_deepspeed_clipping), under the variables `accelerate launch` sets."""

from __future__ import annotations

import os

import pytest

from llm_rl.errors import RecipeError
from llm_rl.training.args import DEEPSPEED_CLIPPING_VARIABLE, sync_deepspeed_clipping


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

"""The recipe's `ppo:` section (llm_rl.algorithms.ppo.settings): TRL's PPOConfig names with its defaults, and
the keys llm_rl's PPO refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.algorithms.ppo.settings import PPO_REFUSED_KEYS, PPOSettings, ppo_settings
from llm_rl.errors import RecipeError
from llm_rl.recipe.load import load_recipe
from tests.conftest import write

# TRL 1.12's PPOConfig keys that keep their meaning, with its defaults (its ppo_config.py).
TRL_PPO_DEFAULTS = {
    "num_ppo_epochs": 4,
    "num_mini_batches": 1,
    "kl_coef": 0.05,
    "kl_estimator": "k1",
    "cliprange": 0.2,
    "cliprange_value": 0.2,
    "vf_coef": 0.1,
    "gamma": 1.0,
    "lam": 0.95,
    "whiten_rewards": False,
    "missing_eos_penalty": None,
    "stop_token_id": None,
    "local_rollout_forward_batch_size": 64,
    "ds3_gather_for_generation": True,
    "dataset_num_proc": None,
}


def test_ppo_section_keeps_trl_names_and_defaults(tmp_path: Path) -> None:
    defaults = PPOSettings()
    for key, value in TRL_PPO_DEFAULTS.items():
        assert getattr(defaults, key) == value, key
    # Two defaults are llm_rl's (as before): responses end at EOS, and no sample tables.
    assert (defaults.stop_token, defaults.num_sample_generations) == ("eos", 0)
    every_key = {**TRL_PPO_DEFAULTS, "missing_eos_penalty": 1.0, "stop_token": None, "stop_token_id": 7}
    recipe = load_recipe(
        write(tmp_path / "all.yaml", {"algorithm": "ppo", "ppo": {**every_key, "adam_beta2": 0.99}})
    )
    settings = ppo_settings(recipe)
    assert settings.stop_token_id == 7 and settings.training_arguments == {"adam_beta2": 0.99}
    for key in PPO_REFUSED_KEYS:
        with pytest.raises(RecipeError, match=f"ppo.{key}: not used by llm_rl's PPO"):
            load_recipe(write(tmp_path / "refused.yaml", {"ppo": {key: 1}}))

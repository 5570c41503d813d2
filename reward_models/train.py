"""Train a reward model with TRL's RewardTrainer.

    accelerate launch reward_models/train.py [--config reward_models/configs/X.yaml] [--set key=value ...]

With no --config, the embedded default: the tiny arithmetic model learns to prefer right sums over
wrong ones, offline, in about a minute on a CPU (reward_models/configs/arithmetic.yaml).
"""

import sys
from pathlib import Path

from llm_rl.cli import reward_entry_point

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "arithmetic.yaml"

if __name__ == "__main__":
    sys.exit(reward_entry_point(DEFAULT_CONFIG))

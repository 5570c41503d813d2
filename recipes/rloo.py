"""RLOO training: `accelerate launch recipes/rloo.py [--config RECIPE.yaml] [--set key=value ...]`.

With no --config it trains the embedded default (a tiny model on single-digit sums) on CPU.
"""

import sys
from pathlib import Path

from llm_rl.cli import entry_point

DEFAULT_RECIPE = Path(__file__).resolve().parent / "arithmetic" / "rloo.yaml"

if __name__ == "__main__":
    sys.exit(entry_point("rloo", DEFAULT_RECIPE))

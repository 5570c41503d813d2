"""`python -m llm_rl.cli ...`: the `llm-rl` command, run from a checkout without installing it."""

import sys

from llm_rl.cli import main

if __name__ == "__main__":
    sys.exit(main())

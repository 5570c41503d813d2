"""The command line's exit codes, and the guard that turns a command's errors into them.

Exit codes (DESIGN.md): 0 success; 2 bad input, with one message on stderr and no traceback unless
`--debug`; 1 a failure while training.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from llm_rl.errors import TrainingFailure, UserInputError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# A run stopped by SIGTERM or SIGUSR1 after its checkpoint (EX_TEMPFAIL: the same command resumes it).
EXIT_PREEMPTED = 75


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

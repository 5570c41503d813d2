"""Print `name==floor` for each Hugging Face package pyproject.toml admits from a lower bound: the versions
`make test-floors` installs, so that the floors tested are the floors declared.

    python scripts/floor_requirements.py    # transformers==4.56.2 accelerate==1.10.1 ...

torch is not among them: older torch is published for CUDA only (gigabytes a version), so the floors run
on the same CPU build of torch as the rest of the suite.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
FLOORED = ("transformers", "accelerate", "trl", "peft", "datasets", "deepspeed")
LOWER_BOUND = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)\s*>=\s*(?P<version>[0-9][0-9A-Za-z.]*)")


def floors(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """Each package of FLOORED with the lower bound its dependency line declares."""
    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    found = {}
    for line in declared:
        match = LOWER_BOUND.match(line)
        if match and match["name"].lower() in FLOORED:
            found[match["name"].lower()] = match["version"]
    missing = sorted(set(FLOORED) - set(found))
    if missing:
        raise SystemExit(f"{pyproject}: no lower bound (>=) declared for {', '.join(missing)}")
    return found


if __name__ == "__main__":
    print(" ".join(f"{name}=={version}" for name, version in floors().items()))
    sys.exit(0)

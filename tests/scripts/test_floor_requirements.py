"""scripts/floor_requirements.py: the versions `make test-floors` installs are pyproject.toml's floors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))

from floor_requirements import FLOORED, floors  # noqa: E402


def test_every_floored_package_is_pinned_to_its_declared_lower_bound() -> None:
    found = floors()
    assert set(found) == set(FLOORED)
    declared = (REPO / "pyproject.toml").read_text()
    for name, version in found.items():
        assert f'"{name}>={version}' in declared


def test_a_package_without_a_lower_bound_is_named(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["transformers", "trl>=1.16"]\n')
    with pytest.raises(
        SystemExit, match="no lower bound .* for accelerate, datasets, deepspeed, peft, transformers"
    ):
        floors(pyproject)

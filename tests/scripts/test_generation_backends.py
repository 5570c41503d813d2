"""scripts/generation_backends.py: one small side-by-side run prints a row per backend, hf's ratio 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_entry


@pytest.mark.slow
def test_the_script_measures_hf_and_static_side_by_side(tmp_path: Path) -> None:
    output = tmp_path / "backends.json"
    args = ["--batches", "4", "--new-tokens", "3", "--repeats", "1", "--json", str(output)]
    result = run_entry(["scripts/generation_backends.py", *args], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(output.read_text())
    assert [row["backend"] for row in rows] == ["hf", "static"]
    assert rows[0]["ratio_to_hf"] == 1.0 and all(row["tokens_per_s"] > 0 for row in rows)

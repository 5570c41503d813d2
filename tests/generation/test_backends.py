"""`generation.backend` on this host: what `auto` means, and the backends refused at recipe load with
exit code 2 and a message naming the key (greedy and sampled equality: tests/algorithms/)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from llm_rl.errors import RecipeError
from llm_rl.generation.backends import check_backend, check_backend_settings, resolve_backend, vllm_problem
from tests.conftest import LLM_RL, REPO, write_recipe


def validate(recipe: Path, **env: str) -> subprocess.CompletedProcess:
    """`llm-rl validate RECIPE` in a fresh process, with `env` added to this one's environment."""
    return subprocess.run(
        [LLM_RL, "validate", str(recipe)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_auto_is_hf_here_and_a_named_backend_is_itself() -> None:
    assert resolve_backend("auto") == "hf"
    assert [resolve_backend(name) for name in ("hf", "static", "paged")] == ["hf", "static", "paged"]
    assert check_backend("auto") == "hf"


def test_paged_with_min_new_tokens_is_refused() -> None:
    """transformers' continuous batching ignores min_new_tokens (measured): it would change what is sampled."""
    with pytest.raises(RecipeError, match="generation.backend: 'paged'.*ignores generation.min_new_tokens"):
        check_backend_settings("paged", min_new_tokens=2)


@pytest.mark.skipif(vllm_problem() is None, reason="vLLM is installed in this environment")
def test_vllm_without_vllm_is_refused_at_validate_with_exit_2(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", generation={"backend": "vllm"})
    result = validate(recipe)
    assert result.returncode == 2, result.stderr
    assert (
        "generation.backend: 'vllm' cannot run on this host: vLLM is not installed in this environment"
        in result.stderr
    )
    assert "make vllm-env" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_static_without_a_working_compiler_is_refused_at_validate_with_exit_2(tmp_path: Path) -> None:
    """No C++ compiler for torch's inductor (and no cached kernels): static cannot compile on CPU."""
    recipe = write_recipe(tmp_path / "recipe.yaml", generation={"backend": "static"})
    result = validate(
        recipe, CXX=str(tmp_path / "no-such-compiler"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache")
    )
    assert result.returncode == 2, result.stderr
    assert (
        "generation.backend: 'static' cannot run on this host: torch.compile failed on cpu" in result.stderr
    )

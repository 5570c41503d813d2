"""The rules of the house (docs/architecture.md), read from the source's imports with `ast`.

- the lower layers (schema, data, models, rewards, training, monitoring) import nothing from the
  algorithms, the run or the tools;
- the tools load no trainer when imported, and name no run-folder file themselves (`llm_rl.run_folder`);
- no import circles;
- algorithm-specific branches live in `llm_rl/algorithms/` alone.

Each rule is also run on a small package written to break it, so that a rule that can no longer fail
fails here.
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.run_folder import FINAL_DIR, METRICS_FILE, RECIPE_FILE, SUMMARY_FILE, VALUE_MODEL_DIR

PACKAGE = Path(__file__).resolve().parent.parent / "llm_rl"
LOWER_LAYERS = ("schema", "data", "models", "generation", "rewards", "training", "monitoring")
UPPER_LAYERS = ("algorithms", "run", "tools")
# STAGES_DIR is left out: "stages" is also a recipe key, which the tools read.
RUN_FOLDER_NAMES = {RECIPE_FILE, METRICS_FILE, SUMMARY_FILE, FINAL_DIR, VALUE_MODEL_DIR}


@dataclass
class Module:
    """One module of a package: its name, file, and what it imports."""

    name: str
    path: Path
    tree: ast.Module
    # Modules of the package it imports, anywhere in the file (functions included).
    imports: set[str] = field(default_factory=set)
    # Those imported when the module itself is (top level, outside `if TYPE_CHECKING:`).
    eager: set[str] = field(default_factory=set)
    # Names imported from other packages at the top level, as "package.module:name".
    eager_external: set[str] = field(default_factory=set)


def read_package(root: Path) -> dict[str, Module]:
    """Every module under `root` (a package folder) by dotted name, with its imports resolved."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = Module(name, path, ast.parse(path.read_text()))
    for module in modules.values():
        module.imports |= dynamic_imports(module.tree, modules)
        for node, eager in import_nodes(module.tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                node = absolute(node, module)
            for target in imported_modules(node, root.name, modules):
                module.imports.add(target)
                if eager:
                    module.eager.add(target)
            if (
                eager
                and isinstance(node, ast.ImportFrom)
                and node.module
                and not node.module.startswith(root.name)
            ):
                module.eager_external |= {f"{node.module}:{alias.name}" for alias in node.names}
            if eager and isinstance(node, ast.Import):
                module.eager_external |= {f"{alias.name}:" for alias in node.names}
    return modules


def import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, and whether it runs when the module is imported."""
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lazy |= {id(inner) for inner in ast.walk(node) if inner is not node}
        elif is_type_checking_block(node):
            lazy |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, id(node) not in lazy


def absolute(node: ast.ImportFrom, module: Module) -> ast.ImportFrom:
    """`from .x import y` in `pkg.a.b` as `from pkg.a.x import y`."""
    parts = module.name.split(".")
    package = parts if module.path.name == "__init__.py" else parts[:-1]
    base = package[: len(package) - node.level + 1]
    name = ".".join([*base, node.module] if node.module else base)
    return ast.ImportFrom(module=name, names=node.names, level=0)


def dynamic_imports(tree: ast.Module, modules: dict[str, Module]) -> set[str]:
    """Modules of the package named as strings to `importlib.import_module` or `__import__`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
            "import_module",
            "__import__",
        ):
            found |= {
                arg.value for arg in node.args if isinstance(arg, ast.Constant) and arg.value in modules
            }
    return found


def is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imported_modules(node: ast.Import | ast.ImportFrom, package: str, modules: dict[str, Module]) -> set[str]:
    """The package's modules an import statement loads (`from a import b` loads `a.b` when it is one)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if not node.module or not node.module.startswith(package) or node.level:
        return set()
    submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
    names_from_module = len(submodules) < len(node.names)
    return submodules | ({node.module} if names_from_module and node.module in modules else set())


def layer_of(name: str) -> str:
    """`llm_rl.tools.doctor` -> `tools`; `llm_rl.schema` -> `schema`."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


# --- the rules: each returns its violations as sentences ---


def lower_layers_import_upward(modules: dict[str, Module]) -> list[str]:
    return [
        f"{module.name} imports {target}"
        for module in modules.values()
        if layer_of(module.name) in LOWER_LAYERS
        for target in sorted(module.imports)
        if layer_of(target) in UPPER_LAYERS
    ]


def eager_closure(start: str, modules: dict[str, Module]) -> set[str]:
    """The package's modules that importing `start` imports."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += modules[name].eager
    return seen


def trainer_module(module: Module) -> str | None:
    """What makes a module a trainer: it is the run, PPO's trainer, or it imports a trainer class."""
    if layer_of(module.name) == "run" or module.name.endswith("ppo.trainer"):
        return module.name
    for imported in sorted(module.eager_external):
        source, _, name = imported.partition(":")
        if source.split(".")[0] in ("trl", "transformers") and (
            name.endswith("Trainer") or source.endswith("trainer")
        ):
            return imported
    return None


def tools_load_trainers(modules: dict[str, Module]) -> list[str]:
    found = []
    for name in sorted(modules):
        if layer_of(name) != "tools":
            continue
        for loaded in sorted(eager_closure(name, modules)):
            trainer = trainer_module(modules[loaded])
            if trainer:
                found.append(f"importing {name} loads a trainer: {loaded} ({trainer})")
    return found


def tools_name_run_folder_files(modules: dict[str, Module]) -> list[str]:
    return [
        f"{module.name}:{node.lineno} names {node.value!r} (use llm_rl.run_folder)"
        for module in modules.values()
        if layer_of(module.name) == "tools"
        for node in ast.walk(module.tree)
        if isinstance(node, ast.Constant) and node.value in RUN_FOLDER_NAMES
    ]


def import_circles(modules: dict[str, Module]) -> list[str]:
    """Every circle of imports (function-level imports included), once each, by depth-first search."""
    circles, state, stack = [], {}, []

    def visit(name: str) -> None:
        state[name] = "open"
        stack.append(name)
        for target in sorted(modules[name].imports):
            if state.get(target) == "open":
                circles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = "done"

    for name in sorted(modules):
        if name not in state:
            visit(name)
    return circles


# Where an algorithm's name may be written outside algorithms/, because the name is the thing itself:
# the schema's default algorithm, `migrate --to`'s default target, and the TRL imports (TRL's GRPO
# script format is GRPO's, its PPO scripts' PPO's).
NAMES_ALGORITHMS_ON_PURPOSE = {
    "schema.recipe",
    "cli.parser",
    "recipe.trl_import.grpo",
    "recipe.trl_import.ppo",
    "recipe.trl_import.ppo_keys",
}


def algorithm_branches(modules: dict[str, Module], algorithms: set[str]) -> list[str]:
    """An algorithm's name written as a string (compared, a key, a case, an argument), or an algorithm's
    section read by attribute, outside the algorithms."""
    found = []
    for module in modules.values():
        within = module.name.partition(".")[2]
        if layer_of(module.name) == "algorithms":
            continue
        for node in ast.walk(module.tree):
            named = isinstance(node, ast.Constant) and node.value in algorithms
            if named and within not in NAMES_ALGORITHMS_ON_PURPOSE:
                found.append(f"{module.name}:{node.lineno} names the algorithm {node.value!r}")
            if isinstance(node, ast.Attribute) and node.attr in algorithms:
                found.append(f"{module.name}:{node.lineno} reads .{node.attr}")
    return found


def violations(modules: dict[str, Module], algorithms: set[str]) -> dict[str, list[str]]:
    return {
        "lower layers import upward": lower_layers_import_upward(modules),
        "tools load a trainer": tools_load_trainers(modules),
        "tools name run-folder files": tools_name_run_folder_files(modules),
        "import circles": import_circles(modules),
        "algorithm branches outside algorithms/": algorithm_branches(modules, algorithms),
    }


# --- the tests ---


@pytest.fixture(scope="module")
def llm_rl_modules() -> dict[str, Module]:
    return read_package(PACKAGE)


@pytest.mark.parametrize(
    "rule",
    [
        "lower layers import upward",
        "tools load a trainer",
        "tools name run-folder files",
        "import circles",
        "algorithm branches outside algorithms/",
    ],
)
def test_llm_rl_keeps_the_rule(llm_rl_modules: dict[str, Module], rule: str) -> None:
    assert violations(llm_rl_modules, set(ALGORITHMS))[rule] == []


def defines_an_algorithm(module: Module) -> bool:
    """A module that is an algorithm (a module-level `NAME`) or declares one (`X = GroupTrainer(...)`)."""
    for node in module.tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        target = ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
        declared = isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "GroupTrainer"
        if target == "NAME" or declared:
            return True
    return False


def home_module(algorithm: object) -> str:
    """The module an algorithm is, or the one that declares it."""
    if isinstance(algorithm, types.ModuleType):
        return algorithm.__name__
    return next(
        name
        for name, module in list(sys.modules.items())
        if name.startswith("llm_rl.algorithms.")
        and any(value is algorithm for value in vars(module).values())
    )


def test_the_registry_names_every_algorithm_module(llm_rl_modules: dict[str, Module]) -> None:
    """An algorithm module the registry does not list would be dead code, or an algorithm half added."""
    registry = llm_rl_modules["llm_rl.algorithms.registry"]
    algorithm_modules = {
        name
        for name, module in llm_rl_modules.items()
        if layer_of(name) == "algorithms" and defines_an_algorithm(module)
    }
    assert algorithm_modules == registry.imports - {"llm_rl.algorithms.base", "llm_rl.errors"}
    assert {home_module(algorithm) for algorithm in ALGORITHMS.values()} == algorithm_modules


BROKEN = {
    "pkg/__init__.py": "",
    "pkg/schema.py": "from pkg.algorithms import fancy\n",
    "pkg/algorithms/__init__.py": "",
    "pkg/algorithms/fancy.py": "import pkg.run.train\n",
    "pkg/run/__init__.py": "",
    "pkg/run/train.py": "from trl import GRPOTrainer\nfrom pkg.tools import report\n",
    "pkg/tools/__init__.py": "",
    "pkg/data/__init__.py": "",
    "pkg/data/rows.py": "import importlib\n\nRUN = importlib.import_module('pkg.run.train')\n",
    "pkg/models/__init__.py": "",
    "pkg/models/load.py": "from ..tools import report\n\n\ndef section(raw):\n    return raw['grpo']\n",
    "pkg/tools/report.py": (
        "from pkg.algorithms import fancy\n\n"
        "def show(recipe):\n"
        "    if recipe.algorithm == 'ppo':\n"
        "        return recipe.ppo\n"
        "    return open('metrics.jsonl').read()\n"
    ),
}


def test_each_rule_fails_on_a_package_that_breaks_it(tmp_path: Path) -> None:
    for relative, text in BROKEN.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    found = violations(read_package(tmp_path / "pkg"), {"grpo", "ppo"})
    assert found["lower layers import upward"] == [
        "pkg.data.rows imports pkg.run.train",
        "pkg.models.load imports pkg.tools.report",
        "pkg.schema imports pkg.algorithms.fancy",
    ]
    assert (
        "importing pkg.tools.report loads a trainer: pkg.run.train (pkg.run.train)"
        in found["tools load a trainer"]
    )
    assert found["tools name run-folder files"] == [
        "pkg.tools.report:6 names 'metrics.jsonl' (use llm_rl.run_folder)"
    ]
    assert found["import circles"] == [
        "pkg.algorithms.fancy -> pkg.run.train -> pkg.tools.report -> pkg.algorithms.fancy"
    ]
    assert sorted(found["algorithm branches outside algorithms/"]) == [
        "pkg.models.load:5 names the algorithm 'grpo'",
        "pkg.tools.report:4 names the algorithm 'ppo'",
        "pkg.tools.report:5 reads .ppo",
    ]


# --------------------------------------------------------------------------------------------------
# Module size
# --------------------------------------------------------------------------------------------------

# A module a newcomer reads in one sitting.
MAX_MODULE_LINES = 350
# Modules still over the bound, each at most its size when the bound came in: they may shrink, not grow,
# and leave this list once under it.
OVERSIZED: dict[str, int] = {}


def module_sizes(package: Path) -> dict[str, int]:
    """Lines of every module of a package, by path relative to it."""
    return {
        path.relative_to(package).as_posix(): len(path.read_text().splitlines())
        for path in sorted(package.rglob("*.py"))
    }


def size_problems(sizes: dict[str, int], oversized: dict[str, int], bound: int) -> list[str]:
    """Modules over the bound and not listed, listed ones that grew, and listed ones now under it."""
    problems = []
    for path, lines in sizes.items():
        ceiling = oversized.get(path, bound)
        if lines > ceiling:
            problems.append(f"{path}: {lines} lines, above {ceiling}")
    problems += [f"{path}: now within {bound} lines; drop it from OVERSIZED" for path in oversized
                 if sizes.get(path, 0) <= bound]  # fmt: skip
    return problems


def test_no_module_grows_past_the_size_bound() -> None:
    assert size_problems(module_sizes(PACKAGE), OVERSIZED, MAX_MODULE_LINES) == []


def test_the_size_rule_fails_on_modules_that_break_it() -> None:
    sizes = {"small.py": 10, "new_big.py": 400, "listed.py": 500, "shrunk.py": 300}
    assert size_problems(sizes, {"listed.py": 450, "shrunk.py": 420}, 350) == [
        "new_big.py: 400 lines, above 350",
        "listed.py: 500 lines, above 450",
        "shrunk.py: now within 350 lines; drop it from OVERSIZED",
    ]

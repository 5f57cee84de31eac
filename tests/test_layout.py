"""The layout the design promises: spica_core is plain Python in packages, with one home for errors."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import spica_core

CORE = Path(spica_core.__file__).parent
PACKAGES = ("config", "store", "space", "deployment", "engines", "predictors", "planner", "evaluate", "run", "search", "emit", "calibrate")


def test_importing_every_module_of_spica_core_loads_neither_prefect_nor_the_engines() -> None:
    code = (
        "import importlib, json, pkgutil, sys, spica_core\n"
        "names = [m.name for m in pkgutil.walk_packages(spica_core.__path__, 'spica_core.')]\n"
        "for n in names: importlib.import_module(n)\n"
        "heavy = ('prefect', 'dynamo', 'aiconfigurator_core', 'vizier', 'jax', 'prophet', 'pmdarima')\n"
        "print(json.dumps({'modules': names, 'loaded': [h for h in heavy if h in sys.modules]}))\n"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out["loaded"] == []
    on_disk = {".".join(("spica_core", *f.relative_to(CORE).with_suffix("").parts)).removesuffix(".__init__")
               for f in CORE.rglob("*.py")} - {"spica_core"}
    assert set(out["modules"]) == on_disk   # every module was imported, none was skipped


ROOT = CORE.parent
CODE = ("spica_core", "spica_cli", "tasks", "flows", "deployments")


def test_every_library_the_code_imports_is_declared_in_pyproject() -> None:
    """A new machine installs only what pyproject.toml declares; what another package happens to bring may go."""
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]
    declared = {re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}
    providers = packages_distributions()
    undeclared = set()
    for folder in CODE:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                         else [])
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in CODE or top == "__future__":
                        continue
                    dists = {d.lower().replace("_", "-") for d in providers.get(top, [top])}
                    if not dists & declared:
                        undeclared.add(f"{path.relative_to(ROOT)}: {top} ({', '.join(sorted(dists))})")
    assert sorted(undeclared) == []


def test_every_module_sits_in_a_package_and_every_package_declares_its_public_names() -> None:
    top = sorted(p.name for p in CORE.glob("*.py"))
    assert top == ["__init__.py", "errors.py"]
    for package in PACKAGES:
        init = ast.parse((CORE / package / "__init__.py").read_text())
        exported = [node for node in init.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        assert exported, f"spica_core/{package}/__init__.py has no __all__"
        names = ast.literal_eval(exported[0].value)
        module = __import__(f"spica_core.{package}", fromlist=names)
        assert all(hasattr(module, n) for n in names), package


def test_no_error_class_is_defined_outside_errors_py() -> None:
    import spica_core.errors as errors

    user_facing = {name for name, obj in vars(errors).items()
                   if isinstance(obj, type) and issubclass(obj, errors.SpicaError)}
    assert all(name.endswith("Error") for name in user_facing)
    for path in CORE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                assert not any(b.endswith(("Error", "Exception")) or b in user_facing for b in bases), \
                    f"{path.relative_to(CORE)} defines the error class {node.name}"


# ---------------------------------------------------------------- the import graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in CORE.rglob("*.py")}


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node that can run: imports inside functions count, those under ``if TYPE_CHECKING:`` never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped.update(id(n) for b in node.body for n in ast.walk(b))
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def _lazy_names(init: Path) -> dict[str, str]:
    """A lazy package's name → submodule table (``_FROM`` in its ``__init__``), or {} for an eager one."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_FROM":
            table: dict[str, str] = {}
            for key, value in zip(node.value.keys, node.value.values):  # type: ignore[union-attr]
                if key is None:  # **dict.fromkeys((names...), "module")
                    names, module = value.args  # type: ignore[attr-defined]
                    table.update(dict.fromkeys(ast.literal_eval(names), ast.literal_eval(module)))
            return table
    return {}


def _imports(module: str) -> list[tuple[str, str | None]]:
    """(imported module, name) for every spica_core import the module can run."""
    out: list[tuple[str, str | None]] = []
    for node in _runtime_nodes(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("spica_core"):
            out += [(node.module, a.name) for a in node.names]  # type: ignore[misc]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.startswith("spica_core")]
    return out


def _edges() -> dict[str, set[str]]:
    """Module → the modules importing it loads: the named submodule, or the module a lazy package maps the
    name to, plus the package ``__init__`` itself (whose own imports are its edges)."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, name in _imports(module):
            hits = {target} if target in MODULES else set()
            if name is not None and f"{target}.{name}" in MODULES:
                hits.add(f"{target}.{name}")
            elif name is not None and target in MODULES and MODULES[target].name == "__init__.py":
                sub = _lazy_names(MODULES[target]).get(name)
                if sub:
                    hits.add(f"{target}.{sub}")
            edges[module] |= hits - {module}
    return edges


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else None


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of a directed graph, or None (iterative depth-first search)."""
    state: dict[str, int] = {}
    for root in graph:
        if root in state:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path, state[root] = [root], 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def test_no_module_of_spica_core_imports_itself_through_others() -> None:
    assert _cycle(_edges()) is None


def test_the_packages_form_a_dag() -> None:
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module, targets in _edges().items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a and b and a != b:
                graph[a].add(b)
    assert _cycle(graph) is None
    assert graph["config"] == set() and graph["store"] == set()        # the bottom
    assert "planner" not in graph["deployment"] | graph["space"]       # the candidate sits below the stages


def test_a_package_imports_only_what_another_exports() -> None:
    unexported = []
    for module in MODULES:
        for target, name in _imports(module):
            package = target.split(".")[1] if target.count(".") else None
            if name is None or package is None or package == _package(module) or package == "errors" \
                    or f"{target}.{name}" in MODULES:
                continue
            exported = __import__(f"spica_core.{package}", fromlist=["__all__"]).__all__
            if name not in exported:
                unexported.append(f"{module} imports {target}.{name}")
    assert unexported == []


def test_one_trace_reader() -> None:
    readers = [_module_name(p) for p in CORE.rglob("*.py")
               for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.FunctionDef) and node.name in ("read_trace", "trace_lines")]
    assert readers == ["spica_core.config.trace", "spica_core.config.trace"]

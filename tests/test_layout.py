"""The layout the design promises: spica_core is plain Python in packages, with one home for errors."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import spica_core

CORE = Path(spica_core.__file__).parent
PACKAGES = ("config", "space", "evaluate", "search", "planner", "predictors", "run")


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
    assert {f"spica_core.{p}" for p in PACKAGES} <= set(out["modules"])
    assert len(out["modules"]) > 40


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

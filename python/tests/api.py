"""The package's public API as its type stubs declare it: modules, functions, classes and their
members. Shared by the stub test and the call coverage (conftest.py, --api-coverage)."""
import ast
import importlib
import pathlib

from conftest import BUILD

STUBS = BUILD / "python" / "meganeura"  # as built: __init__.pyi has the generated builders spliced in
MODULES = {"meganeura": "__init__.pyi", "meganeura.energy": "energy.pyi", "meganeura.models": "models.pyi",
           "meganeura.workloads": "workloads.pyi"}


def declared():
    """{module: {"functions": [names], "classes": {class: [members]}}} from the .pyi files."""
    api = {}
    for module, stub in MODULES.items():
        tree = ast.parse((STUBS / stub).read_text())
        functions, classes = [], {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                functions.append(node.name)
            elif isinstance(node, ast.ClassDef):
                members = []
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        members.append(item.name)
                    elif isinstance(item, ast.AnnAssign):
                        members.append(item.target.id)
                classes[node.name] = members
        api[module] = {"functions": functions, "classes": classes}
    return api


def runtime_public(module):
    """Public names the module really has, without the submodules the package imports."""
    m = importlib.import_module(module)
    names = {n for n in dir(m) if not n.startswith("_")}
    return {n for n in names if type(getattr(m, n)).__name__ != "module"}

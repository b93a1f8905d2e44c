"""The type stubs declare exactly what the module has: every public name, class and member."""
import importlib

import meganeura as mn

from api import declared, runtime_public


def test_stubs_declare_exactly_the_public_api():
    for module, api in declared().items():
        stubbed = set(api["functions"]) | set(api["classes"])
        assert stubbed == runtime_public(module), module
        m = importlib.import_module(module)
        for cls_name, members in api["classes"].items():
            runtime = {n for n in vars(getattr(m, cls_name)) if not n.startswith("_")}
            assert {n for n in members if not n.startswith("_")} == runtime, f"{module}.{cls_name}"


def test_star_import_keeps_the_builtins():
    scope = {}
    exec("from meganeura import *", scope)
    assert "Graph" in scope and "relu" in scope
    for builtin in ("abs", "max", "sum", "slice", "compile"):
        assert builtin not in scope and hasattr(mn, builtin)
    assert mn.__version__.count(".") == 2

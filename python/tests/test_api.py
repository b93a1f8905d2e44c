"""The type stubs declare exactly what the module has: every public name, class and member."""
import ast
import importlib
import inspect
import re

import meganeura as mn

from api import MODULES, STUBS, declared, runtime_public


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


def _signature(text):
    """Parameters of `name(args) -> ret` (a stub's def or pybind11's signature line): {name: default
    node or None}, in order, without self."""
    tree = ast.parse(text)
    fn = tree.body[0]
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = dict(zip((p.arg for p in positional), defaults))
    params.update(zip((p.arg for p in a.kwonlyargs), a.kw_defaults))
    params.pop("self", None)
    return params


def _runtime_signature(obj):
    """The signature pybind11 writes as the first docstring line; None for overloaded functions, for
    options taken as **kwargs (energy.predict and the like) and for the package's Python functions."""
    obj = inspect.unwrap(obj)  # --api-coverage counts calls through a wrapper
    if inspect.isfunction(obj):
        return None
    first = (obj.__doc__ or "").split("\n", 1)[0]
    m = re.match(r"^(\w+)\((.*)\)( -> .*)?$", first)
    if not m or "**" in m.group(2):  # overloads, and keyword options passed on whole
        return None
    args = re.sub(r"<[^<>]*>", "...", m.group(2))  # reprs of objects (a default Optimizer)
    return _signature(f"def {m.group(1)}({args}): ...")


def _stub_functions():
    """(qualified name, stub def node, runtime object) for every function and method the stubs declare."""
    for module, stub in MODULES.items():
        m = importlib.import_module(module)
        tree = ast.parse((STUBS / stub).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                yield f"{module}.{node.name}", node, getattr(m, node.name)
            elif isinstance(node, ast.ClassDef):
                cls = getattr(m, node.name)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and not item.decorator_list:
                        yield f"{module}.{node.name}.{item.name}", item, getattr(cls, item.name)


def test_stubs_give_the_modules_parameters_and_defaults():
    """A default lives in C++ (the struct the binding reads it from); a stub that states one must
    agree with the module, and every stub names the module's parameters in order."""
    compared = 0
    for name, node, obj in _stub_functions():
        runtime = _runtime_signature(obj)
        if runtime is None:
            continue
        stub = _signature(ast.unparse(node))
        unnamed = [re.fullmatch(r"arg\d+", p) is not None for p in runtime]  # pybind11's names for unnamed ones
        assert len(stub) == len(runtime) and all(u or s == r for s, r, u in zip(stub, runtime, unnamed)), \
            f"{name}: stub parameters {list(stub)}, module {list(runtime)}"
        for param, default in stub.items():
            if default is None or (isinstance(default, ast.Constant) and default.value is Ellipsis):
                continue
            want = runtime[param]
            assert want is not None, f"{name}({param}): the stub gives a default the module does not have"
            assert ast.literal_eval(default) == ast.literal_eval(want), \
                f"{name}({param}): stub default {ast.unparse(default)}, module {ast.unparse(want)}"
            compared += 1
    assert compared > 100, f"only {compared} defaults compared: the signature parsing is broken"

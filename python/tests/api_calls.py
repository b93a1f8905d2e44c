"""Counts calls of every public function and method the stubs declare, by wrapping them in place
(module attributes and class attributes), for conftest.py's --api-coverage."""
import functools
import importlib

from api import declared


def _counting(counts, key, f):
    counts[key] = 0

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        counts[key] += 1
        return f(*args, **kwargs)

    return wrapper


def instrument():
    counts = {}
    for module, api in declared().items():
        m = importlib.import_module(module)
        for name in api["functions"]:
            setattr(m, name, _counting(counts, f"{module}.{name}", getattr(m, name)))
        for cls_name, members in api["classes"].items():
            cls = getattr(m, cls_name)
            for name in members:
                key = f"{module}.{cls_name}.{name}"
                attr = cls.__dict__.get(name)
                if isinstance(attr, property):
                    setter = attr.fset and _counting(counts, key + " (set)", attr.fset)
                    setattr(cls, name, property(_counting(counts, key, attr.fget), setter))
                elif isinstance(attr, staticmethod):
                    setattr(cls, name, staticmethod(_counting(counts, key, attr.__func__)))
                elif attr is not None:
                    setattr(cls, name, _counting(counts, key, attr))
                else:
                    raise AssertionError(f"the stubs declare {key}, which does not exist")
    return counts

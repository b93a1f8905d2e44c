"""Meganeura from Python: build a typed graph, compile it for the CPU or a Vulkan device, and
train or run it on NumPy arrays.

    import numpy as np, meganeura as mn
    g = mn.Graph()
    x = g.input("x", (64, 16))
    y = g.input("labels", (64,), dtype="i32")
    loss = mn.cross_entropy(mn.models.mlp(g, x), y)
    trainer = mn.Trainer(g, loss, mn.Optimizer("adamw", lr=3e-3), device="cpu")
    trainer.step({"x": xs, "labels": ys})      # -> loss (float)

Errors raised in C++ keep their message: ValueError (bad shapes, names, options), TypeError
(wrong dtype or argument type), KeyError (unknown buffer), FileNotFoundError (missing file),
meganeura.FileError (malformed file; both an OSError and a ValueError), RuntimeError (device).
"""
import builtins as _builtins

from . import _meganeura
from ._meganeura import *  # noqa: F401,F403  (graph, builders, Session, Trainer, files)
from ._meganeura import __version__  # noqa: F401
from . import energy, models, workloads  # noqa: F401

# `from meganeura import *` leaves Python's own abs, max, sum, slice and compile alone; they are
# mn.abs, mn.max, ... as in NumPy.
__all__ = sorted(n for n in dir(_meganeura) if not n.startswith("_") and not hasattr(_builtins, n))

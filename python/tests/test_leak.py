"""No leak across compile/run/free: 1,000 cycles of a small model (graph, session, a training step,
arrays out, freed) leave the resident set within 10% of what it was after a warm-up. The model's
parameters, moments and arena take about 50 KiB per cycle, so a leaked session or trainer would
grow the set by about 50 MiB, several times the 10% allowance.

Under AddressSanitizer (the sanitized stage preloads its runtime) the resident set is the wrong
measure: freed blocks wait in the sanitizer's quarantine (256 MiB by default), which fills during
the run. There the test measures the heap's live bytes from the sanitizer's own counter instead,
with the same 10% allowance."""
import ctypes
import gc
import os

import numpy as np

import meganeura as mn


def _sanitizer_live_bytes():
    try:
        counter = ctypes.CDLL(None).__sanitizer_get_current_allocated_bytes
    except AttributeError:
        return None
    counter.restype = ctypes.c_size_t
    return counter


_live = _sanitizer_live_bytes()


def memory_bytes():
    if _live is not None:
        return _live()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cycle(x, y):
    g = mn.Graph()
    xs = g.input("x", (8, 64))
    ys = g.input("labels", (8,), dtype="i32")
    w = g.parameter("w", (64, 64), mn.Init.normal(0.1))
    logits = xs @ w
    g.output("logits", logits)
    with mn.compile(g, "cpu", threads=1) as s:
        out = s.run({"x": x})["logits"]
    t = mn.Trainer(g, mn.cross_entropy(logits, ys), mn.Optimizer("sgd", lr=0.1), threads=1)
    loss = t.step({"x": x, "labels": y})
    return out.sum() + loss


def test_no_leak_over_1000_compile_run_free_cycles():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 64)).astype(np.float32), rng.integers(0, 64, 8).astype(np.int32)
    for _ in range(100):  # warm-up: allocator pools, thread stacks, caches reach their size
        cycle(x, y)
    gc.collect()
    before = memory_bytes()
    for _ in range(1000):
        cycle(x, y)
    gc.collect()
    after = memory_bytes()
    assert after <= before * 1.10, f"{'live heap' if _live else 'RSS'} grew from {before / 2**20:.1f} MiB to {after / 2**20:.1f} MiB"

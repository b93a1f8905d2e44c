#!/usr/bin/python3
"""Python call overhead per training step, against the C++ API, for the mlp step.

One trainer, one process, one batch (the mlp task's: x float32 [64, 16], labels int32 [64]).
Blocks of steps alternate between the sides (in a rotating order per round):
  python   trainer.step({"x": x, "labels": y})            (set both inputs, step, loss as a float)
  c++      Session::set(x), Session::set(labels), Trainer::step()   (timed in C++)
  c++ raw  Session::write_raw(x), write_raw(labels), Trainer::step()
The binding writes arrays already in the stored layout with write_raw, so "python - c++ raw" is
the cost of the Python layer itself (argument parsing, the dtype and shape checks, the GIL
release around the step, the float returned); "python - c++" is what a C++ user calling set()
would see. The overheads are medians of the differences between a round's blocks; a second,
minimal training step (one 16x2 weight, the same inputs) shows the same per-call cost with less
noise. The machine (CPU model, ISA, load) is named in the output.

Usage: PYTHONPATH=build/python python3 python/bench/step_overhead.py [--rounds 90] [--per-block 50]
       [--threads 1] [--json out.json]
"""
import argparse
import json
import os
import platform
import time

import numpy as np

import meganeura as mn
from meganeura import _meganeura


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def isa():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    return "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"


def quartiles(samples):
    q = np.percentile(samples, [25, 50, 75])
    return {"median": float(q[1]), "p25": float(q[0]), "p75": float(q[2]), "samples": [float(s) for s in samples]}


def mlp_trainer(threads):
    g = mn.Graph()
    x = g.input("x", (64, 16))
    y = g.input("labels", (64,), dtype="i32")
    trainer = mn.Trainer(g, mn.cross_entropy(mn.models.mlp(g, x), y), mn.Optimizer("adamw", lr=1e-3),
                         device="cpu", threads=threads)
    xs, ys = mn.models.synthetic_classification(64, 0)
    return trainer, {"x": xs, "labels": ys}


def tiny_trainer(threads):
    """The smallest training step with the same two inputs: it shows the per-call cost with little noise."""
    g = mn.Graph()
    x = g.input("x", (64, 16))
    y = g.input("labels", (64,), dtype="i32")
    w = g.parameter("w", (16, 2), mn.Init.normal(0.1))
    trainer = mn.Trainer(g, mn.cross_entropy(x @ w, y), mn.Optimizer("sgd", lr=1e-3), device="cpu", threads=threads)
    xs, ys = mn.models.synthetic_classification(64, 0)
    return trainer, {"x": xs, "labels": ys % 2}


def measure(trainer, inputs, rounds, per_block):
    """Blocks of the three kinds in a rotating order per round; the overheads are the medians of
    the differences within each round (adjacent blocks share the machine's state)."""
    for _ in range(200):  # warm-up
        trainer.step(inputs)
    _meganeura._cpp_step_loop(trainer, inputs, 4, per_block)
    step = trainer.step

    def python_block():
        t0 = time.perf_counter_ns()
        for _ in range(per_block):
            step(inputs)
        return (time.perf_counter_ns() - t0) / per_block

    kinds = {
        "python": python_block,
        "cpp_set": lambda: _meganeura._cpp_step_loop(trainer, inputs, 1, per_block)[0],
        "cpp_write_raw": lambda: _meganeura._cpp_step_loop(trainer, inputs, 1, per_block, raw=True)[0],
    }
    names = list(kinds)
    samples = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % 3:] + names[:r % 3]:
            samples[k].append(kinds[k]())
    out = {f"{k}_ns": quartiles(v) for k, v in samples.items()}
    py = np.array(samples["python"])
    out["overhead_vs_cpp_set_ns"] = quartiles(py - np.array(samples["cpp_set"]))
    out["overhead_vs_cpp_write_raw_ns"] = quartiles(py - np.array(samples["cpp_write_raw"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=90)
    ap.add_argument("--per-block", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="CPU backend threads (1: the least noise)")
    ap.add_argument("--json")
    a = ap.parse_args()
    result = {
        "machine": {"cpu": cpu_model(), "isa": isa(), "cores": os.cpu_count(), "load_1min": os.getloadavg()[0],
                    "python": platform.python_version(), "numpy": np.__version__},
        "rounds": a.rounds, "steps_per_block": a.per_block, "threads": a.threads,
    }
    print(f"{cpu_model()} ({isa()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}), "
          f"{a.rounds} rounds x {a.per_block} steps per block, {a.threads} backend thread(s); medians [p25, p75]:")
    for model, make in (("mlp", mlp_trainer), ("tiny", tiny_trainer)):
        trainer, inputs = make(a.threads)
        r = measure(trainer, inputs, a.rounds, a.per_block)
        result[model] = r
        print(f"  {model} step")
        for label, key in (("python  trainer.step(dict)", "python_ns"), ("c++     set + step", "cpp_set_ns"),
                           ("c++     write_raw + step", "cpp_write_raw_ns"),
                           ("python - c++ set", "overhead_vs_cpp_set_ns"),
                           ("python - c++ write_raw", "overhead_vs_cpp_write_raw_ns")):
            q = r[key]
            print(f"    {label:28s} {q['median']:10.0f} ns  [{q['p25']:.0f}, {q['p75']:.0f}]")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

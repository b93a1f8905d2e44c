#!/usr/bin/python3
"""CI check of the benchmark binaries without PyTorch (numpy only).

- bench_core_parity, mlp in f64: loss, logits, every gradient and the first AdamW update against
  a hand-written numpy forward/backward (agreement ~1e-12 expected, 1e-9 required);
- bench_core_parity, chargpt in f32: every parameter has a finite gradient and an update, and
  the initial loss is near ln(vocab);
- bench_core_step: the command protocol, a falling training loss, and one-line errors;
- both binaries reject bad arguments with a one-line message and a non-zero status.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import read_safetensors  # noqa: E402

failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-300))


def mlp_reference(w, cfg, opt):
    """Loss, logits, gradients and the parameters after one AdamW step, in float64."""
    x, y = w["input.x"].astype(np.float64), w["input.labels"]
    n_layers = cfg["layers"] + 1
    acts, pre = [x], []
    for i in range(n_layers):
        z = acts[-1] @ w[f"mlp.{i}.weight"] + w[f"mlp.{i}.bias"]
        pre.append(z)
        acts.append(np.maximum(z, 0) if i < n_layers - 1 else z)
    logits = acts[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(y)
    loss = -logp[np.arange(n), y].mean()
    d = np.exp(logp)
    d[np.arange(n), y] -= 1
    d /= n
    grads = {}
    for i in reversed(range(n_layers)):
        grads[f"mlp.{i}.weight"] = acts[i].T @ d
        grads[f"mlp.{i}.bias"] = d.sum(axis=0)
        if i:
            d = (d @ w[f"mlp.{i}.weight"].T) * (pre[i - 1] > 0)
    # First AdamW step: bias-corrected moments are g and g^2; lr at step 1 of the warm-up.
    lr = opt["lr"] * (1 / opt["warmup_steps"] if opt["warmup_steps"] else 1)
    step1 = {k: w[k] * (1 - lr * opt["weight_decay"]) - lr * g / (np.abs(g) + opt["eps"]) for k, g in grads.items()}
    return loss, logits, grads, step1


def run(cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parity", required=True)
    ap.add_argument("--step", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()

    r = run([a.parity, "--model", "mlp", "--precision", "f64", "--out", a.work, "--threads", "2"])
    check(r.returncode == 0, f"parity mlp f64 runs ({r.stderr.strip()})")
    w, meta = read_safetensors(os.path.join(a.work, "mlp-f64.weights.safetensors"))
    ours, _ = read_safetensors(os.path.join(a.work, "mlp-f64.ours.safetensors"))
    cfg, opt = json.loads(meta["config"]), json.loads(meta["optimizer"])
    loss, logits, grads, step1 = mlp_reference(w, cfg, opt)
    check(abs(float(ours["loss"]) - loss) < 1e-9 * loss, f"mlp loss {float(ours['loss'])} vs numpy {loss}")
    check(rel(ours["logits"], logits) < 1e-9, "mlp logits match numpy")
    for k, g in grads.items():
        check(rel(ours["grad." + k], g) < 1e-9, f"mlp gradient of {k} matches numpy ({rel(ours['grad.' + k], g):.1e})")
        delta_ours, delta_ref = ours["step1." + k] - w[k], step1[k] - w[k]
        check(rel(delta_ours, delta_ref) < 1e-9, f"mlp AdamW update of {k} matches numpy ({rel(delta_ours, delta_ref):.1e})")
    check(set(k[5:] for k in ours if k.startswith("grad.")) == set(grads), "mlp: gradients of exactly the parameters")

    r = run([a.parity, "--model", "chargpt", "--precision", "f32", "--out", a.work, "--threads", "2"])
    check(r.returncode == 0, f"parity chargpt f32 runs ({r.stderr.strip()})")
    w, meta = read_safetensors(os.path.join(a.work, "chargpt-f32.weights.safetensors"))
    ours, _ = read_safetensors(os.path.join(a.work, "chargpt-f32.ours.safetensors"))
    cfg = json.loads(meta["config"])
    params = [k for k in w if not k.startswith("input.")]
    check(len(params) == 2 + 9 * cfg["layers"], f"chargpt has {len(params)} parameters")
    for k in params:
        g = ours["grad." + k]
        check(g.shape == w[k].shape and np.isfinite(g).all() and np.abs(g).sum() > 0, f"chargpt gradient of {k}")
        check(np.isfinite(ours["step1." + k]).all() and not np.array_equal(ours["step1." + k], w[k]),
              f"chargpt update of {k}")
    check(abs(float(ours["loss"]) - math.log(cfg["vocab"])) < 0.5, f"chargpt initial loss {float(ours['loss']):.3f} "
          f"near ln({cfg['vocab']})")

    r = run([a.step, "--model", "mlp", "--threads", "2"], stdin="step 5\ntrain 2\ninfer 3\nlatency 4\nstep 20\nquit\n")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    check(r.returncode == 0 and len(lines) == 6 and lines[0].get("ready"), "step server answers every command")
    if len(lines) == 6:
        check([len(x["seconds"]) for x in lines[1:]] == [5, 2, 3, 4, 20], "one sample per run")
        check(all(t > 0 for x in lines[1:] for t in x["seconds"]), "positive times")
        check(lines[5]["loss"] < lines[1]["loss"], f"training loss falls ({lines[1]['loss']:.3f} -> {lines[5]['loss']:.3f})")

    for cmd, stdin, what in [
        ([a.step, "--model", "mlp"], "step two\n", "bad command"),
        ([a.step, "--model", "resnet"], "", "unknown model"),
        ([a.parity, "--precision", "f16", "--out", a.work], None, "bad precision"),
        ([a.parity, "--seed", "x", "--out", a.work], None, "non-integer seed"),
        ([a.parity, "--colour", "red"], None, "unknown flag"),
    ]:
        r = run(cmd, stdin)
        err = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(err) == 1 and "[bench]" in err[0], f"{what}: one-line error ({err})")

    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

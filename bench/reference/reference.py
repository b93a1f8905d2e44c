#!/usr/bin/python3
"""The PyTorch side of the workload gates: builds a workload, loads the weights and inputs
`meganeura run` uses, runs forward, loss and backward in strict f32 and writes the same dump
(outputs by name, "loss", "grad.<parameter>").

Strict f32: TF32 off, highest matmul precision. oneDNN is disabled by default: Debian 12's
PyTorch 1.13 returns wrong conv1d weight gradients through GELU's backward with oneDNN on when
the incoming gradient is non-contiguous (docs/workloads.md); --mkldnn re-enables it.
--check-f64 runs the model once more in f64 and reports how far the f32 gradients are from it
("trusting the reference")."""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import st_io  # noqa: E402


def strict_f32(mkldnn):
    torch.backends.mkldnn.enabled = mkldnn
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def load(model, weights):
    state = model.state_dict()
    missing = [k for k in state if k not in weights and not k.endswith("num_batches_tracked")]
    if missing:
        raise SystemExit(f"reference: tensor '{missing[0]}' is missing from the weights ({len(missing)} missing)")
    with torch.no_grad():
        for name, t in state.items():
            if name.endswith("num_batches_tracked"):
                continue
            w = weights[name]
            if tuple(w.shape) != tuple(t.shape):
                raise SystemExit(f"reference: tensor '{name}' has shape {tuple(w.shape)}, the model expects {tuple(t.shape)}")
            t.copy_(torch.from_numpy(np.asarray(w, dtype=np.float64)).to(t.dtype))


def run(workload, scale, weights, inputs, dtype, device="cpu"):
    torch.manual_seed(0)
    model = models.build(workload, scale).to(dtype)
    load(model, weights)
    model = model.to(device)
    model.eval()  # batch norm in inference form
    inp = {k: (torch.from_numpy(v).to(dtype) if v.dtype.kind == "f" else torch.from_numpy(v)).to(device)
           for k, v in inputs.items()}
    outs, loss = model.run(inp)
    loss.backward()
    dump = {k: v.detach().cpu() for k, v in outs.items()}
    dump["loss"] = loss.detach().cpu()
    for name, p in model.named_parameters():
        dump["grad." + name] = (p.grad if p.grad is not None else torch.zeros_like(p)).cpu()
    return dump


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(models.BUILDERS))
    ap.add_argument("--scale", default="ci", choices=["full", "ci"])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--dump")
    ap.add_argument("--mkldnn", action="store_true", help="leave oneDNN enabled (not for gates)")
    ap.add_argument("--check-f64", action="store_true", help="compare the f32 run with an f64 run of the same model")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where PyTorch runs the model")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"reference: --device cuda, but this PyTorch ({torch.__version__}) sees no CUDA device")
    strict_f32(a.mkldnn)
    if a.threads:
        torch.set_num_threads(a.threads)
    weights, inputs = st_io.read(a.weights), st_io.read(a.inputs)
    d32 = run(a.workload, a.scale, weights, inputs, torch.float32, a.device)
    if a.dump:
        st_io.write(a.dump, {k: v.to(torch.float32).contiguous().numpy() for k, v in d32.items()})
    if a.check_f64:
        d64 = run(a.workload, a.scale, weights, inputs, torch.float64, a.device)
        worst, worst_name = 0.0, ""
        for k, v in d64.items():
            x, y = d32[k].double(), v
            err = float((x - y).norm() / y.norm()) if float(y.norm()) > 0 else float((x - y).norm())
            if not err <= worst:  # NaN counts as worst
                worst, worst_name = err, k
        print(f"f32 vs f64: worst relative L2 {worst:.3g} ({worst_name})")
        if not worst < 1e-3:
            raise SystemExit(f"reference: f32 run differs from f64 by {worst:.3g} at {worst_name}")


if __name__ == "__main__":
    main()

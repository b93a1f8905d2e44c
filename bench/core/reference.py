#!/usr/bin/python3
"""PyTorch reference for the compiler core's built-in models (mlp, chargpt) on the CPU.

  reference.py parity --bin PATH --work DIR --out FILE
                                               gates: loss, logits, every gradient and AdamW
                                               update, f32 and f64, plus negative controls
  reference.py timing --step-bin PATH ...      training step / F+L+B / inference / one-example
                                               latency, ours vs PyTorch
  reference.py table DIR                       markdown tables from DIR/parity.json, DIR/timing*.json

The models are written here independently of the C++ sources, from their specification:
  mlp:     x @ W + b per layer (weights stored [in, out]), ReLU between, cross-entropy (mean).
  chargpt: token embedding; per layer RMSNorm (eps 1e-5, with weight) -> q, k, v projections,
           rotary embeddings (rotate_half, theta 10000) on q and k, causal grouped-query attention
           (4 query heads, 2 key/value heads, head dim 16, scale 1/sqrt(16)), output projection,
           residual; RMSNorm -> SwiGLU FFN (silu(h Wg) * (h Wu)) Wd, residual; final RMSNorm;
           logits through the tied embedding; cross-entropy (mean) over every position.
Weights and the batch are read from the safetensors file the C++ side wrote, so both sides see
exactly the same numbers.
"""
import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np

# The machine is shared: with GNU OpenMP's default spin-waiting, PyTorch's two threads lose their
# cores to other processes and run 10-30x slower; passive waiting is the fair setting.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402  (after the OpenMP setting, which is read when the library loads)
import torch.nn.functional as F  # noqa: E402

from safetensors_np import SafetensorsError, read_safetensors  # noqa: E402

GATE_LOSS_REL = 0.01
GATE_LOGITS_REL_L2 = 0.01
GATE_GRAD_REL_L2 = 0.05
GATE_GRAD_COSINE = 0.99
MODELS = ("mlp", "chargpt")


def fail(message):
    print(f"reference.py: {message}", file=sys.stderr)
    sys.exit(1)


# ---- The models ------------------------------------------------------------------------------

def mlp_logits(p, inputs, cfg):
    h = inputs["x"]
    for i in range(cfg["layers"] + 1):
        h = h @ p[f"mlp.{i}.weight"] + p[f"mlp.{i}.bias"]
        if i < cfg["layers"]:
            h = torch.relu(h)
    return h


def mlp_loss(logits, inputs, cfg):
    return F.cross_entropy(logits, inputs["labels"].long())


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x, pairs=False):
    if pairs:  # the other common layout (rotating adjacent pairs): a negative control only
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(seq, head_dim, theta, dtype, pairs=False):
    # Angles in double, as a careful implementation computes them, then cast.
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv_freq)
    angles = np.repeat(angles, 2, axis=-1) if pairs else np.concatenate((angles, angles), axis=-1)
    return torch.from_numpy(np.cos(angles)).to(dtype), torch.from_numpy(np.sin(angles)).to(dtype)


def chargpt_logits(p, inputs, cfg):
    ids = inputs["ids"].long()
    b, s = ids.shape
    dim, heads, kv_heads, eps = cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["norm_eps"]
    hd = dim // heads
    control = cfg.get("control")  # a deliberate mistake, to show the gates catch it
    pairs = control == "rope_pairs"
    emb = p["tok_embedding"]
    cos, sin = rope_tables(s, hd, cfg["rope_theta"], emb.dtype, pairs)
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
    x = F.embedding(ids, emb)
    for layer in range(cfg["layers"]):
        pre = f"layers.{layer}."
        h = rms_norm(x, p[pre + "attn_norm"], eps)
        q = (h @ p[pre + "wq"]).view(b, s, heads, hd).transpose(1, 2)
        k = (h @ p[pre + "wk"]).view(b, s, kv_heads, hd).transpose(1, 2)
        v = (h @ p[pre + "wv"]).view(b, s, kv_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q, pairs) * sin
        k = k * cos + rotate_half(k, pairs) * sin
        if control == "kv_tiled":
            k, v = k.repeat(1, heads // kv_heads, 1, 1), v.repeat(1, heads // kv_heads, 1, 1)
        else:  # query head j reads key/value head j // (heads / kv_heads)
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = (q @ k.transpose(-1, -2)) / (hd ** 0.5)
        attn = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v
        x = x + attn.transpose(1, 2).reshape(b, s, dim) @ p[pre + "wo"]
        h = rms_norm(x, p[pre + "ffn_norm"], eps)
        x = x + (F.silu(h @ p[pre + "w_gate"]) * (h @ p[pre + "w_up"])) @ p[pre + "w_down"]
    x = rms_norm(x, p["final_norm"], eps)
    return x @ emb.t()


def chargpt_loss(logits, inputs, cfg):
    return F.cross_entropy(logits.reshape(-1, cfg["vocab"]), inputs["targets"].long())


FORWARD = {"mlp": (mlp_logits, mlp_loss), "chargpt": (chargpt_logits, chargpt_loss)}


def read_or_fail(path):
    try:
        return read_safetensors(path)
    except (OSError, SafetensorsError) as e:
        fail(str(e))


def load_model(weights_path, dtype):
    """Parameters (leaf tensors requiring grad), inputs and config from a weights file."""
    tensors, metadata = read_or_fail(weights_path)
    cfg = json.loads(metadata["config"])
    cfg["optimizer"] = json.loads(metadata["optimizer"])
    params, inputs = {}, {}
    for name, array in tensors.items():
        if name.startswith("input."):
            t = torch.from_numpy(array)
            inputs[name[len("input."):]] = t.to(dtype) if t.is_floating_point() else t
        else:
            params[name] = torch.from_numpy(array).to(dtype).requires_grad_(True)
    return params, inputs, cfg


def make_optimizer(params, cfg):
    """torch.optim.AdamW with the C++ task's settings and its warm-up + cosine schedule."""
    if cfg["kind"] != "adamw":
        fail(f"unsupported optimizer {cfg['kind']}")
    opt = torch.optim.AdamW(params, lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"])
    warmup, total, base, low = cfg["warmup_steps"], cfg["total_steps"], cfg["lr"], cfg["min_lr"]

    def factor(step):  # step counts from 0; the update being taken is step + 1
        t = step + 1
        if warmup and t <= warmup:
            return t / warmup
        if total <= 0:
            return 1.0
        progress = min(1.0, (t - warmup) / (total - warmup))
        return (low + 0.5 * (base - low) * (1 + np.cos(np.pi * progress))) / base
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


# ---- Parity ----------------------------------------------------------------------------------

def compare(ours, ref):
    a, b = ours.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    ref_norm, ours_norm = np.linalg.norm(b), np.linalg.norm(a)
    diff = np.linalg.norm(a - b)
    rel = diff / ref_norm if ref_norm > 0 else diff
    if ref_norm > 0 and ours_norm > 0:
        cosine = float(np.dot(a, b) / (ref_norm * ours_norm))
    else:
        cosine = 1.0 if ref_norm == ours_norm else 0.0
    return {"rel_l2": float(rel), "cosine": cosine, "max_abs": float(np.max(np.abs(a - b))),
            "ref_norm": float(ref_norm)}


def run_ours(binary, out_dir, model, precision, threads):
    """Runs bench_core_parity; returns the stem of the two files it wrote."""
    cmd = [binary, "--model", model, "--precision", precision, "--out", out_dir, "--threads", str(threads)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"{' '.join(cmd)} failed: {run.stderr.strip()}")
    return os.path.join(out_dir, f"{model}-{precision}")


def evaluate(stem, model, precision, control=None):
    """Our loss, logits and gradients against PyTorch's, with the gates."""
    dtype = torch.float64 if precision == "f64" else torch.float32
    params, inputs, cfg = load_model(stem + ".weights.safetensors", dtype)
    ours, _ = read_or_fail(stem + ".ours.safetensors")
    cfg["control"] = control
    if control == "sign_flip":  # one gradient negated: same norms, opposite direction
        ours["grad.layers.0.wv"] = -ours["grad.layers.0.wv"]
    logits_fn, loss_fn = FORWARD[model]
    logits = logits_fn(params, inputs, cfg)
    loss = loss_fn(logits, inputs, cfg)
    loss.backward()

    ref_loss, our_loss = float(loss.detach()), float(ours["loss"])
    result = {
        "model": model, "precision": precision,
        "loss": {"ours": our_loss, "reference": ref_loss, "rel_error": abs(our_loss - ref_loss) / abs(ref_loss)},
        "logits": compare(ours["logits"], logits.detach().numpy()),
        "gradients": {},
    }
    for name, p in params.items():
        key = "grad." + name
        if key not in ours:
            fail(f"{stem}.ours.safetensors has no {key}")
        result["gradients"][name] = compare(ours[key], p.grad.numpy())
    # One AdamW step from the same weights, on PyTorch's own gradients: compare the updates.
    initial = {name: p.detach().clone() for name, p in params.items()}
    opt, _ = make_optimizer(list(params.values()), cfg["optimizer"])
    if cfg["optimizer"]["clip_norm"] > 0:
        torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["optimizer"]["clip_norm"])
    opt.step()
    result["updates"] = {}
    for name, p in params.items():
        key = "step1." + name
        if key not in ours:
            fail(f"{stem}.ours.safetensors has no {key}")
        result["updates"][name] = compare(ours[key] - initial[name].numpy(), (p.detach() - initial[name]).numpy())
    extra = sorted(k for k in ours if k.startswith("grad.") and k[5:] not in params)
    if extra:
        fail(f"{stem}.ours.safetensors has gradients of unknown parameters: {', '.join(extra)}")
    grads = result["gradients"]
    worst_rel = max(grads, key=lambda n: grads[n]["rel_l2"])
    worst_cos = min(grads, key=lambda n: grads[n]["cosine"])
    result["worst_rel_l2"] = {"parameter": worst_rel, **grads[worst_rel]}
    result["worst_cosine"] = {"parameter": worst_cos, **grads[worst_cos]}
    ups = result["updates"]
    worst_up = max(ups, key=lambda n: ups[n]["rel_l2"])
    result["worst_update"] = {"parameter": worst_up, **ups[worst_up]}
    result["gates"] = {
        "loss": result["loss"]["rel_error"] < GATE_LOSS_REL,
        "logits": result["logits"]["rel_l2"] < GATE_LOGITS_REL_L2,
        "gradients": all(g["rel_l2"] < GATE_GRAD_REL_L2 and g["cosine"] > GATE_GRAD_COSINE for g in grads.values()),
        "update": all(u["rel_l2"] < GATE_GRAD_REL_L2 and u["cosine"] > GATE_GRAD_COSINE for u in ups.values()),
    }
    result["pass"] = all(result["gates"].values())
    return result


# Deliberate mistakes in the reference (or in our gradients) that the gates must reject.
CONTROLS = {
    "sign_flip": "gradient of layers.0.wv negated (norms unchanged)",
    "kv_tiled": "key/value heads tiled instead of grouped (head j reads kv head j % 2)",
    "rope_pairs": "rotary embedding on adjacent pairs instead of halves",
}


def cmd_parity(args):
    stems = {(m, prec): run_ours(args.bin, args.work, m, prec, args.threads) for m in MODELS for prec in ("f32", "f64")}
    results = [evaluate(stem, m, prec) for (m, prec), stem in stems.items()]
    controls = []
    for name, what in CONTROLS.items():
        r = evaluate(stems[("chargpt", "f32")], "chargpt", "f32", control=name)
        controls.append({"control": name, "description": what, "detected": not r["pass"],
                         "failed_gates": [g for g, ok in r["gates"].items() if not ok],
                         "worst_rel_l2": r["worst_rel_l2"], "worst_cosine": r["worst_cosine"]})
    doc = {"machine": machine_info(args.bin), "gates": {
        "loss_rel_error": GATE_LOSS_REL, "logits_rel_l2": GATE_LOGITS_REL_L2,
        "grad_rel_l2": GATE_GRAD_REL_L2, "grad_cosine": GATE_GRAD_COSINE}, "results": results,
        "negative_controls": controls}
    write_json(args.out, doc)
    for c in controls:
        print(f"control {c['control']:10s}: {'detected' if c['detected'] else 'NOT DETECTED'} "
              f"(failed gates: {', '.join(c['failed_gates']) or 'none'})")
    for r in results:
        w = r["worst_rel_l2"]
        print(f"{r['model']:8s} {r['precision']}: loss rel {r['loss']['rel_error']:.2e}, "
              f"logits rel L2 {r['logits']['rel_l2']:.2e}, worst grad {w['parameter']} rel L2 {w['rel_l2']:.2e} "
              f"1-cos {1 - r['worst_cosine']['cosine']:.1e}, worst update {r['worst_update']['parameter']} rel L2 "
              f"{r['worst_update']['rel_l2']:.2e} -> {'pass' if r['pass'] else 'FAIL'}")
    ok = all(r["pass"] for r in results) and all(c["detected"] for c in controls)
    return 0 if ok else 2


# ---- Timing ----------------------------------------------------------------------------------

class TorchWorkload:
    """The same model, batch and optimizer as the C++ training task, in eager PyTorch."""

    def __init__(self, model, weights_path, optimizer):
        self.params, self.inputs, self.cfg = load_model(weights_path, torch.float32)
        self.logits_fn, self.loss_fn = FORWARD[model]
        self.first = {name: t[:1] for name, t in self.inputs.items()}  # one example: the latency shape
        plist = list(self.params.values())
        self.plist = plist
        self.clip = optimizer["clip_norm"]
        self.opt, self.sched = make_optimizer(plist, optimizer)

    def loss(self):
        return self.loss_fn(self.logits_fn(self.params, self.inputs, self.cfg), self.inputs, self.cfg)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.plist, self.clip)
        self.opt.step()
        self.sched.step()
        return loss.item()

    def train(self):
        for p in self.plist:
            p.grad = None
        loss = self.loss()
        loss.backward()
        return loss.item()

    def infer(self):
        with torch.inference_mode():
            return self.logits_fn(self.params, self.inputs, self.cfg)

    def latency(self):
        with torch.inference_mode():
            return self.logits_fn(self.params, self.first, self.cfg)

    def run(self, phase, n):
        fn = {"step": self.step, "train": self.train, "infer": self.infer, "latency": self.latency}[phase]
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return samples


class OurServer:
    """bench_core_step as a subprocess speaking one JSON line per command."""

    def __init__(self, binary, model, threads):
        self.proc = subprocess.Popen([binary, "--model", model, "--threads", str(threads)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = self._reply()

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            fail(f"bench_core_step exited ({self.proc.returncode}): {self.proc.stderr.read().strip()}")
        return json.loads(line)

    def run(self, phase, n):
        self.proc.stdin.write(f"{phase} {n}\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if reply.get("phase") != phase or len(reply.get("seconds", [])) != n:
            fail(f"bench_core_step answered {reply} to '{phase} {n}'")
        return reply["seconds"]

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=30)


def summary(samples):
    s = np.array(samples) * 1e3
    q1, med, q3 = np.percentile(s, [25, 50, 75])
    return {"median_ms": float(med), "q1_ms": float(q1), "q3_ms": float(q3), "iqr_ms": float(q3 - q1),
            "min_ms": float(s.min()),
            "samples_ms": [float(v) for v in s]}


def cmd_timing(args):
    torch.set_num_threads(args.threads)
    doc = {"machine": machine_info(args.step_bin), "protocol": {
        "warmups": args.warmups, "samples": args.samples, "block": args.block,
        "alternation": "round-robin over phases; per phase `block` runs of ours, then of PyTorch; "
                       "repeated until `samples` each",
        "threads": args.threads}, "results": []}
    for model in MODELS:
        weights = os.path.join(args.work, f"{model}-f32.weights.safetensors")
        if not os.path.exists(weights):
            subprocess.run([args.parity_bin, "--model", model, "--precision", "f32", "--out", args.work],
                           check=True, capture_output=True)
        ours = OurServer(args.step_bin, model, args.threads)
        ref = TorchWorkload(model, weights, ours.ready["optimizer"])
        entry = {"model": model, "parameters": ours.ready["parameters"], "device": ours.ready["device"],
                 "compile_step_s": ours.ready["compile_step_s"], "optimizer": ours.ready["optimizer"], "phases": {}}
        phases = ("step", "train", "infer", "latency")
        for phase in phases:
            ours.run(phase, args.warmups)
            ref.run(phase, args.warmups)
        # Round-robin over phases and sides, so that a burst of load from other processes lands
        # on every cell alike instead of on one.
        samples = {(side, phase): [] for side in ("ours", "pytorch") for phase in phases}
        while len(samples[("ours", phases[-1])]) < args.samples:
            for phase in phases:
                samples[("ours", phase)] += ours.run(phase, args.block)
                time.sleep(0.02)
                samples[("pytorch", phase)] += ref.run(phase, args.block)
                time.sleep(0.02)
        for phase in phases:
            o, r = summary(samples[("ours", phase)]), summary(samples[("pytorch", phase)])
            entry["phases"][phase] = {"ours": o, "pytorch": r, "ratio": o["median_ms"] / r["median_ms"],
                                      "ratio_of_minima": o["min_ms"] / r["min_ms"]}
            print(f"{model:8s} {phase:6s} ours {o['median_ms']:8.3f} ms (IQR {o['iqr_ms']:.3f})  "
                  f"pytorch {r['median_ms']:8.3f} ms (IQR {r['iqr_ms']:.3f})  ratio {o['median_ms'] / r['median_ms']:.2f}")
        ours.close()
        doc["results"].append(entry)
    write_json(args.out, doc)
    return 0


# ---- Machine and versions --------------------------------------------------------------------

def loaded_blas():
    """Shared libraries of this process that provide BLAS (after torch has run a matmul)."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if re.search(r"blas|lapack|mkl|dnnl", os.path.basename(path)):
                libs.add(os.path.realpath(path))
    return sorted(libs)


def binary_blas(binary):
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    except OSError:
        return []
    return sorted({os.path.realpath(m) for m in re.findall(r"=> (\S*blas\S*)", out)})


def debian_versions(packages):
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *packages], capture_output=True,
                         text=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def machine_info(binary):
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    build_type = compiler = "unknown"
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache) as f:
            for line in f:
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    build_type = line.split("=", 1)[1].strip()
                if line.startswith("CMAKE_CXX_COMPILER:"):
                    compiler = line.split("=", 1)[1].strip()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[:1] \
        if os.path.exists(compiler) else []
    return {
        "cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "numpy": np.__version__,
        "torch_blas_loaded": loaded_blas(), "ours_blas_linked": binary_blas(binary),
        "ours_build_type": build_type, "ours_compiler": version[0] if version else compiler,
        "ours_commit": commit, "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "debian_packages": debian_versions(["python3-torch", "libopenblas0-pthread", "libopenblas-dev"]),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "load_average": list(os.getloadavg()),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path, doc):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# ---- Tables ----------------------------------------------------------------------------------

def cmd_table(args):
    lines = []
    with open(os.path.join(args.dir, "parity.json")) as f:
        parity = json.load(f)
    m = parity["machine"]
    lines += [f"Machine: {m['cpu']}, {m['cores']} cores; PyTorch {m['torch']} "
              f"(BLAS {', '.join(os.path.basename(p) for p in m['torch_blas_loaded']) or 'none found'}); "
              f"ours {m['ours_build_type']} {m['ours_compiler']} at {m['ours_commit']} "
              f"(BLAS {', '.join(os.path.basename(p) for p in m['ours_blas_linked']) or 'none found'}).", ""]
    lines += ["| model | precision | loss (ours) | loss rel. error | logits rel. L2 | worst gradient (rel. L2) "
              "| worst gradient (1 − cosine) | worst AdamW update (rel. L2) | gates |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in parity["results"]:
        w, c = r["worst_rel_l2"], r["worst_cosine"]
        lines.append(f"| {r['model']} | {r['precision']} | {r['loss']['ours']:.6f} | {r['loss']['rel_error']:.1e} "
                     f"| {r['logits']['rel_l2']:.1e} | `{w['parameter']}` {w['rel_l2']:.1e} "
                     f"| `{c['parameter']}` {1 - c['cosine']:.1e} | `{r['worst_update']['parameter']}` "
                     f"{r['worst_update']['rel_l2']:.1e} | {'pass' if r['pass'] else 'FAIL'} |")
    lines += ["", "Negative controls (chargpt, f32): each must fail a gate.", "",
              "| control | failed gates | worst gradient (rel. L2) |", "| --- | --- | --- |"]
    for c in parity["negative_controls"]:
        w = c["worst_rel_l2"]
        lines.append(f"| {c['description']} | {', '.join(c['failed_gates']) or 'NONE (not detected)'} "
                     f"| `{w['parameter']}` {w['rel_l2']:.2f} |")
    for timing_path in sorted(glob.glob(os.path.join(args.dir, "timing*.json"))):
        with open(timing_path) as f:
            timing = json.load(f)
        p = timing["protocol"]
        load = timing["machine"]["load_average"]
        lines += ["", f"Timing ({os.path.basename(timing_path)}): {p['warmups']} warm-ups, {p['samples']} samples per "
                  f"side, alternating in blocks of {p['block']} round-robin over the phases, {p['threads']} "
                  f"thread(s) each side, machine load average {load[0]:.1f} at the start; median (IQR) and minimum "
                  "in ms; ratio = ours / PyTorch (of the medians; of the minima).", "",
                  "| model | phase | ours | PyTorch | ratio | ratio of minima |",
                  "| --- | --- | --- | --- | --- | --- |"]
        names = {"step": "training step (F+L+B+AdamW)", "train": "F+L+B", "infer": "inference forward",
                 "latency": "one-example forward"}
        for r in timing["results"]:
            for phase, t in r["phases"].items():
                o, q = t["ours"], t["pytorch"]
                lines.append(f"| {r['model']} | {names[phase]} | {o['median_ms']:.3f} ({o['iqr_ms']:.3f}), "
                             f"min {o['min_ms']:.3f} | {q['median_ms']:.3f} ({q['iqr_ms']:.3f}), min {q['min_ms']:.3f} "
                             f"| {t['ratio']:.2f} | {t['ratio_of_minima']:.2f} |")
        lines.append("")
        lines.append("Compile (Trainer construction: graph, autodiff, optimizer, planning): " + ", ".join(
            f"{r['model']} {r['compile_step_s'] * 1e3:.1f} ms" for r in timing["results"]) + ".")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.write:
        with open(args.write, "w") as f:
            f.write(text)
    return 0


def main():
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parity")
    p.add_argument("--bin", required=True, help="bench_core_parity")
    p.add_argument("--work", required=True, help="folder for the exchanged safetensors files")
    p.add_argument("--out", required=True, help="results JSON")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.set_defaults(fn=cmd_parity)
    t = sub.add_parser("timing")
    t.add_argument("--step-bin", required=True, help="bench_core_step")
    t.add_argument("--parity-bin", required=True, help="bench_core_parity (writes the weights)")
    t.add_argument("--work", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--warmups", type=int, default=5)
    t.add_argument("--samples", type=int, default=40)
    t.add_argument("--block", type=int, default=2)
    t.add_argument("--threads", type=int, default=os.cpu_count())
    t.set_defaults(fn=cmd_timing)
    s = sub.add_parser("table")
    s.add_argument("dir")
    s.add_argument("--write", help="also write the markdown here")
    s.set_defaults(fn=cmd_table)
    args = ap.parse_args()
    if getattr(args, "warmups", 5) < 5 or getattr(args, "samples", 20) < 20 or getattr(args, "block", 1) < 1:
        fail("the protocol needs at least 5 warm-ups, 20 samples and blocks of at least 1")
    sys.exit(args.fn(args))


if __name__ == "__main__":
    main()

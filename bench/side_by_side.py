#!/usr/bin/python3
"""Times one workload on both sides in one run: `meganeura bench --json` and the PyTorch
reference (eager, the protocol of docs/bench-core.md: 5 warm-ups, at least 20 samples, median and IQR, raw
samples kept), prints ours / PyTorch ratios and writes bench/results/<workload>-<scale>.json
with the machine (its vector ISA and load average), both versions, the BLAS PyTorch loaded and
the math libraries our CLI links.

Usage: bench/side_by_side.py --workload W [--scale ci|full] [--meganeura build/bin/meganeura] [--vulkan | --gpu]
--vulkan also times our Vulkan backend (`--device vulkan`: lavapipe where there is no GPU) and
reports it beside the CPU backend.
--gpu times our Vulkan backend against PyTorch on CUDA, eager and replaying CUDA graphs of each
phase (the forward, forward+loss+backward and the AdamW step captured once), synchronising
after every sample.
MEGANEURA_CLI, where set, is the shell command that runs our CLI (a packed folder's loader).
Timing keeps oneDNN enabled (PyTorch's default, its fastest); the gates disable it."""
import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))
sys.path.insert(0, HERE)  # a packed folder keeps the reference modules beside this script
import models  # noqa: E402
import st_io  # noqa: E402
import reference  # noqa: E402


def measure(f, warmup, samples, sync=lambda: None):
    for _ in range(warmup):
        f()
    sync()
    t = []
    for _ in range(samples):
        t0 = time.perf_counter()
        f()
        sync()
        t.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(t, n=4)
    return {"median_ms": statistics.median(t), "iqr_ms": q[2] - q[0], "samples_ms": t}


def blas_name():
    try:
        with open(f"/proc/{os.getpid()}/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.lower()}
        return sorted(os.path.basename(x) for x in libs)
    except OSError:
        return []


def cpu_isa():
    """The widest x86 vector ISA the CPU reports (the ratios depend on it): AVX-512, AVX2 or older."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "pre-AVX2"


def linked_math_libraries(cli):
    """The GEMM and convolution libraries our CLI is linked against (oneDNN, OpenBLAS), from ldd."""
    try:
        out = subprocess.run(["ldd", cli[-1]], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({line.split()[0] for line in out.splitlines() if "dnnl" in line or "blas" in line})


def torch_side(workload, scale, weights, inputs, warmup, samples, device="cpu"):
    cuda = device == "cuda"
    if not cuda:
        torch.set_num_threads(os.cpu_count())
    reference.strict_f32(True)
    model = models.build(workload, scale)
    reference.load(model, st_io.read(weights))
    model = model.to(device)
    model.eval()
    inp = {k: (torch.from_numpy(v) if v.dtype.kind != "f" else torch.from_numpy(v).float()).to(device)
           for k, v in st_io.read(inputs).items()}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    phases = {}
    with torch.no_grad():
        phases["full"] = measure(lambda: model.run(inp), warmup, samples, sync)

    def train():
        model.zero_grad(set_to_none=True)
        model.run(inp)[1].backward()

    phases["train"] = measure(train, warmup, samples, sync)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=cuda)

    def step():
        opt.zero_grad(set_to_none=True)
        model.run(inp)[1].backward()
        opt.step()

    phases["step"] = measure(step, warmup, samples, sync)
    graphs = cuda_graph_phases(model, inp, opt, warmup, samples) if cuda else None
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"phases": phases, "peak_rss_bytes": peak, "version": torch.__version__, "blas": blas_name(),
           "threads": torch.get_num_threads(), "mkldnn": True, "device": device}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(0)
        out["peak_bytes_kind"] = "torch.cuda.max_memory_allocated"
        out["cuda_graph_phases"] = graphs
    return out


def cuda_graph_phases(model, inp, opt, warmup, samples):
    """Each phase captured once as a CUDA graph (static inputs, static gradient buffers) and
    timed by replaying it: PyTorch without its per-op launch cost."""
    sync = torch.cuda.synchronize
    phases = {}

    def capture(body):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up off the default stream, as capture requires
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(s)
        opt.zero_grad(set_to_none=True)  # backward allocates .grad from the graph's own pool
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        return g

    def forward():
        with torch.no_grad():
            model.run(inp)

    def train():  # gradients accumulate into the same buffers on every replay
        model.run(inp)[1].backward()

    def step():
        model.run(inp)[1].backward()
        opt.step()

    for name, body in (("full", forward), ("train", train), ("step", step)):
        try:
            g = capture(body)
            phases[name] = measure(g.replay, warmup, samples, sync)
        except Exception as e:  # a phase PyTorch cannot capture is reported, not fatal
            phases[name] = {"error": f"{type(e).__name__}: {e}"}
    return phases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(models.BUILDERS))
    ap.add_argument("--scale", default="ci", choices=["ci", "full"])
    ap.add_argument("--meganeura", default=os.path.join(HERE, "..", "build", "bin", "meganeura"))
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--vulkan", action="store_true", help="also time --device vulkan")
    ap.add_argument("--gpu", action="store_true", help="our Vulkan backend against PyTorch on CUDA (eager and CUDA graphs)")
    a = ap.parse_args()
    if a.gpu and not torch.cuda.is_available():
        raise SystemExit(f"side_by_side: --gpu, but this PyTorch ({torch.__version__}) sees no CUDA device")
    cli = shlex.split(os.environ["MEGANEURA_CLI"]) if os.environ.get("MEGANEURA_CLI") else [a.meganeura]
    with tempfile.TemporaryDirectory() as d:
        w, i = os.path.join(d, "w.safetensors"), os.path.join(d, "i.safetensors")
        subprocess.run(cli + ["run", "--workload", a.workload, "--scale", a.scale, "--dump",
                        os.path.join(d, "o.safetensors"), "--write-weights", w, "--write-inputs", i], check=True,
                       stdout=subprocess.DEVNULL)
        def bench(device):
            return json.loads(subprocess.run(cli + ["bench", "--workload", a.workload, "--scale", a.scale,
                                              "--json", "--device", device, "--samples", str(a.samples),
                                              "--warmup", str(a.warmup)],
                                             check=True, capture_output=True, text=True).stdout)
        ours = bench("vulkan" if a.gpu else "cpu")
        vulkan = bench("vulkan") if a.vulkan and not a.gpu else None
        theirs = torch_side(a.workload, a.scale, w, i, a.warmup, a.samples, "cuda" if a.gpu else "cpu")
    ratios = {p: ours["phases"][p]["median_ms"] / theirs["phases"][p]["median_ms"] for p in theirs["phases"]}
    graphs = theirs.get("cuda_graph_phases") or {}
    graph_ratios = {p: ours["phases"][p]["median_ms"] / v["median_ms"] for p, v in graphs.items() if "median_ms" in v}
    result = {"workload": a.workload, "scale": a.scale,
              "machine": {"cpu": ours["machine"]["cpu"], "cores": ours["machine"]["cores"], "isa": cpu_isa(),
                          "system": platform.platform(), "load_average": os.getloadavg()},
              "meganeura_libraries": linked_math_libraries(cli),
              "meganeura": ours, "pytorch": theirs, "ratios_ours_over_pytorch": ratios}
    if a.gpu:
        result["ratios_ours_over_pytorch_cuda_graphs"] = graph_ratios
    if vulkan:
        result["meganeura_vulkan"] = vulkan
        result["ratios_vulkan_over_pytorch"] = {p: vulkan["phases"][p]["median_ms"] / theirs["phases"][p]["median_ms"]
                                                for p in theirs["phases"]}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{a.workload}-{a.scale}{'-gpu' if a.gpu else ''}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for p, r in ratios.items():
        line = (f"{a.workload} {a.scale} {p:6s} ours {ours['phases'][p]['median_ms']:9.2f} ms  "
                f"pytorch {theirs['phases'][p]['median_ms']:9.2f} ms  ratio {r:6.2f}")
        if vulkan:
            line += f"  vulkan {vulkan['phases'][p]['median_ms']:9.2f} ms"
        if p in graph_ratios:
            line += f"  cuda graph {graphs[p]['median_ms']:9.2f} ms ratio {graph_ratios[p]:6.2f}"
        elif p in graphs:
            line += f"  cuda graph: {graphs[p]['error']}"
        print(line)
    print(f"training arena {ours['train_arena_bytes'] / 1e6:.1f} MB; peak RSS ours {ours['peak_rss_bytes'] / 1e6:.1f} MB, "
          f"pytorch {theirs['peak_rss_bytes'] / 1e6:.1f} MB; results in {path}")


if __name__ == "__main__":
    main()

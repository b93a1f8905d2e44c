"""Generation speed: `meganeura generate` (CPU, and Vulkan when a device is present) against
PyTorch eager with a key/value cache (torch_generate.py), SmolLM2-135M's full shape with random
weights, a 128-token prompt, 128 new tokens, batch 1, greedy, both sides on the same number of
threads in one run on one machine. Also the decode bound: the bytes of f32 weights read per
token (f32, and for the f16, Q8_0 and Q4_0 runs their 16 bits or blocks) against the copy bandwidth
bench_stream measures with the same threads, and the prefill
bound: the multiply-adds per prompt token against the f32 multiply-add peak it measures.

Prints a markdown table and writes bench/generate/results/<host>.json.

Usage: bench/generate/run.py [--build DIR] [--threads 2] [--repetitions 5] [--devices cpu,vulkan]
       bench/generate/run.py --report bench/generate/results/<host>.json"""
import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# SmolLM2-135M's config.json (the fields the forward pass reads).
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
           "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": True}
PROMPT, NEW = 128, 128
HELD = ("f16", "q8_0", "q4_0")  # the other weight formats, each run beside f32


def parameters(c):
    h, f, v, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["hidden_size"] // c["num_attention_heads"]
    layer = h * hd * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"]) + 3 * h * f + 2 * h
    return v * h + c["num_hidden_layers"] * layer + h


def prefill_flops_per_token(c):
    """Multiply-adds (two operations each) per prompt token: every weight of the layers once,
    the head's once per prompt (only the last token's logits are computed), and causal
    attention over (PROMPT + 1) / 2 keys on average."""
    h, v, layers = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    layer_weights = (parameters(c) - v * h - h) / layers - 2 * h  # without the norms' scales
    attention = 2 * 2 * h * (PROMPT + 1) / 2  # scores and P V, every head
    return 2 * layers * layer_weights + layers * attention + 2 * v * h / PROMPT


def isa():
    flags = open("/proc/cpuinfo").read()
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def weight_bytes(c, fmt):
    """Bytes of the weights one decode step reads: every matrix once (a tied head reads the
    embedding), in the format's blocks (34 or 18 bytes per 32 weights) or f16, the norms in f32."""
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    norms = (2 * layers + 1) * h
    per = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}[fmt]
    return (parameters(c) - norms) * per + 4 * norms


def ours(binary, config, device, threads, reps, dtype="f32"):
    ids = ",".join(str((i * 7919) % SMOLLM2["vocab_size"]) for i in range(PROMPT))
    runs = []
    for _ in range(reps + 1):
        r = subprocess.run([binary, "generate", "--config", config, "--random-weights", "--prompt-ids", ids,
                            "--max-new-tokens", str(NEW), "--temperature", "0", "--ignore-eos", "--json",
                            "--device", device, "--threads", str(threads), "--max-context", str(PROMPT + NEW),
                            "--weights-dtype", dtype],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": r.stderr.strip()}
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    runs = runs[1:]  # the first run warms the shader and page caches
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("prefill_tokens_per_second", "decode_tokens_per_second", "ttft_ms", "peak_rss_mb")}
    med["device"] = runs[0]["device"]
    return med


def pytorch(config, threads, reps):
    """PyTorch's best of two ways to spend the threads: its own intra-op threads with OpenBLAS on
    one, or one intra-op thread with OpenBLAS on all (both at once oversubscribe the cores: on
    2 cores a decode step took twice as long). Each metric is the better configuration's."""
    best = None
    for torch_threads, blas_threads in ((threads, 1), (1, threads)):
        env = dict(os.environ, OMP_NUM_THREADS=str(torch_threads), OPENBLAS_NUM_THREADS=str(blas_threads))
        r = json.loads(subprocess.run([sys.executable, os.path.join(HERE, "torch_generate.py"), config, str(PROMPT),
                                       str(NEW), str(torch_threads), str(reps)],
                                      capture_output=True, text=True, check=True, env=env).stdout)
        r["config"] = f"torch threads {torch_threads}, OpenBLAS threads {blas_threads}"
        if best is None:
            best = dict(r, prefill_config=r["config"], decode_config=r["config"])
            continue
        for k in ("prefill", "decode"):
            if r[f"{k}_tokens_per_second"] > best[f"{k}_tokens_per_second"]:
                best[f"{k}_tokens_per_second"], best[f"{k}_config"] = r[f"{k}_tokens_per_second"], r["config"]
        best["peak_rss_mb"] = max(best["peak_rss_mb"], r["peak_rss_mb"])
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--devices", default="cpu,vulkan")
    ap.add_argument("--report", help="print a results file instead of running")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            return report(json.load(f))
    binary = os.path.join(a.build, "bin", "meganeura")
    work = tempfile.mkdtemp(prefix="bench-generate-")
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump(SMOLLM2, f)
    stream = json.loads(subprocess.run([os.path.join(a.build, "bin", "bench_stream"), str(a.threads)],
                                       capture_output=True, text=True, check=True).stdout)
    ref = pytorch(config, a.threads, a.repetitions)
    bounds = {fmt: stream["copy_bytes_per_second"] / weight_bytes(SMOLLM2, fmt) for fmt in ("f32",) + HELD}
    rows = {"pytorch": dict(ref, format="f32")}
    for dev in a.devices.split(","):
        rows[dev] = dict(ours(binary, config, dev, a.threads, a.repetitions), format="f32")
    for dev in a.devices.split(","):
        for fmt in HELD:
            rows[f"{dev} {fmt}"] = dict(ours(binary, config, dev, a.threads, a.repetitions, fmt), format=fmt)
    flops = prefill_flops_per_token(SMOLLM2)
    peak = stream["fma_flops_per_second"]
    for r in rows.values():
        if "error" not in r:
            r["prefill_flops_per_second"] = r["prefill_tokens_per_second"] * flops
    out = {"machine": {"host": socket.gethostname(), "cpu": cpu_model(), "isa": isa(), "threads": a.threads},
           "shape": "SmolLM2-135M, prompt 128, 128 new tokens, batch 1, greedy; f32, f16, Q8_0 and Q4_0",
           "weights_bytes": {fmt: weight_bytes(SMOLLM2, fmt) for fmt in bounds}, "stream": stream,
           "decode_bound_tokens_per_second": bounds,
           "prefill_flops_per_token": flops, "prefill_bound_tokens_per_second": peak / flops, "results": rows}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out["repetitions"] = a.repetitions
    with open(os.path.join(HERE, "results", f"{socket.gethostname()}.json"), "w") as f:
        json.dump(out, f, indent=1)
    report(out)


def report(out):
    """Prints a results file (this run's, or one given with --report) as the README's table."""
    m, rows, stream, bounds = out["machine"], out["results"], out["stream"], out["decode_bound_tokens_per_second"]
    ref, flops, peak = rows["pytorch"], out["prefill_flops_per_token"], stream["fma_flops_per_second"]
    devices = [name for name, r in rows.items() if name != "pytorch" and r.get("format") == "f32"]
    print(f"{m['cpu']} ({m['isa']}), {m['threads']} threads; medians of {out.get('repetitions', '?')} runs")
    print(f"copy bandwidth {stream['copy_bytes_per_second'] / 1e9:.1f} GB/s; weights per token: " +
          ", ".join(f"{fmt} {out['weights_bytes'][fmt] / 1e6:.0f} MB -> decode bound {b:.0f} tok/s"
                    for fmt, b in bounds.items()))
    print(f"f32 multiply-add peak {peak / 1e9:.0f} GFLOP/s ({stream['fma_vector']}); {flops / 1e6:.0f} MFLOP per "
          f"prompt token -> prefill bound {peak / flops:.0f} tok/s, {peak / ref['prefill_flops_per_second']:.2f}x "
          f"PyTorch's prefill\n")
    print(f"PyTorch: prefill with {ref['prefill_config']}, decode with {ref['decode_config']}")
    print("| side | weights | prefill tok/s | decode tok/s | decode / PyTorch | prefill / PyTorch | decode / its bound | "
          "prefill / FMA peak | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        if "error" in r:
            print(f"| {name} | failed: {r['error'][:80]} |")
            continue
        p, d = r["prefill_tokens_per_second"], r["decode_tokens_per_second"]
        print(f"| {name} ({r.get('device', 'torch ' + r.get('torch', ''))}) | {r['format']} | {p:.0f} | {d:.1f} | "
              f"{d / ref['decode_tokens_per_second']:.2f} | {p / ref['prefill_tokens_per_second']:.2f} | "
              f"{d / bounds[r['format']]:.0%} | {r['prefill_flops_per_second'] / peak:.0%} | {r['peak_rss_mb']:.0f} |")
    for dev in devices:
        for fmt in HELD:
            r, f32 = rows.get(f"{dev} {fmt}", {"error": ""}), rows[dev]
            if "error" not in r and "error" not in f32:
                print(f"{dev} {fmt} decode / {dev} f32 decode: "
                      f"{r['decode_tokens_per_second'] / f32['decode_tokens_per_second']:.2f}x")


if __name__ == "__main__":
    main()

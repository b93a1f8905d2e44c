"""Summarises bench/distributed/run.sh: per model and configuration, the median update time and
its interquartile range over every round's updates after the first five of each run, the
communication per update, and the examples per second of the global batch."""
import argparse
import glob
import json
import os
import platform
import re
import statistics
import subprocess

WARMUP = 5


def quantiles(xs):
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]
    return q(0.5), q(0.25), q(0.75)


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()
    return {"cpu": cpu, "isa": isa, "cores": os.cpu_count(), "kernel": platform.release(),
            "mpi": mpi[0] if mpi else "?", "load_average": os.getloadavg()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    runs = {}
    for path in sorted(glob.glob(os.path.join(a.work, "*.json"))):
        model, config, _, _ = os.path.basename(path).split(".")
        runs.setdefault((model, config), []).append(json.load(open(path)))
    rows, raw = [], {}
    for (model, config), rs in sorted(runs.items()):
        if config == "single":
            ms = [s for r in rs for s in r["step_ms"][WARMUP:]]
            med, lo, hi = quantiles(ms)
            rows.append((model, config, 1, med, lo, hi, None, None, None, f"{len(ms)} steps"))
            raw[f"{model}.{config}"] = {"step_ms": ms}
            continue
        samples = [s for r in rs for s in r["data_parallel"]["update_ms"][WARMUP:]]
        dp = [r["data_parallel"] for r in rs]
        med, lo, hi = quantiles(samples)
        comm = statistics.median(d["communication_ms_per_update"] for d in dp)
        exposed = statistics.median(d["exposed_communication_ms_per_update"] for d in dp)
        rows.append((model, config, dp[0]["ranks"], med, lo, hi, comm, exposed, dp[0]["reduced_bytes_per_update"],
                     f"{len(samples)} updates, {dp[0]['buckets']} bucket(s)"))
        raw[f"{model}.{config}"] = {"update_ms": samples, "profiles": dp}
    result = {"machine": machine(), "device": a.device, "warmup_updates_dropped": WARMUP, "rows": [
        dict(zip(["model", "config", "ranks", "update_ms_median", "update_ms_q1", "update_ms_q3", "communication_ms",
                  "exposed_communication_ms", "reduced_bytes", "note"], r)) for r in rows], "raw": raw}
    json.dump(result, open(a.out, "w"), indent=1)
    m = result["machine"]
    print(f"{m['cpu']} ({m['isa']}), {m['cores']} cores, {m['mpi']}, load average {m['load_average'][0]:.1f}; "
          f"device {a.device}")
    print("| model | configuration | ranks | update (median, IQR) | examples/s vs one process | communication / update | "
          "waited for it | bytes reduced / update |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = {r[0]: r[3] for r in rows if r[1] == "single"}
    for model, config, ranks, med, lo, hi, comm, exposed, nbytes, note in rows:
        speed = f"{ranks * base[model] / med:.2f}x" if model in base else "-"
        fmt = lambda v: "-" if v is None else f"{v:.2f} ms"
        print(f"| {model} | {config} | {ranks} | {med:.2f} ms ({lo:.2f}-{hi:.2f}) | {speed} | {fmt(comm)} | "
              f"{fmt(exposed)} | {'-' if nbytes is None else f'{nbytes / 1e3:.0f} kB'} |")


if __name__ == "__main__":
    main()

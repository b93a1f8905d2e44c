#!/usr/bin/python3
"""Builds gpualert's labelled failure corpus.

Two kinds of logs:
  real/  produced here by actually running failing programs (Python scripts, C and C++
         programs that segfault, abort or divide by zero, allocations under an address-space
         limit, kill -9, a full tmpfs, permission errors as an unprivileged user, missing
         modules and files). Their exit status or signal is the one observed.
  synth/ long, realistic training logs for causes that need hardware we do not have
         (CUDA OOM, NCCL, CUDA runtime errors, Xid/ECC, device mismatch) and long variants of
         the others: thousands of lines of progress, tqdm-style carriage-return bars, several
         ranks interleaved, the error early and a long tail after it. Deterministic (seeded);
         stored gzip-compressed.

Writes labels.tsv: file, class, status (exit:N | signal:NAME), facts, split.
The held-out split holds template variants that the rules were not tuned on.
Run as root from the repository: tests/alert/corpus/generate.py  (needs cc, c++, mount).
"""
import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
WORK = "/tmp/gpualert-corpus-work"
labels = []


def status_of(rc):
    if rc < 0:
        return "signal:" + signal.Signals(-rc).name
    return "exit:%d" % rc


def record(name, cls, data, status, facts="-", split="train", compress=False):
    sub = "synth" if compress else "real"
    os.makedirs(os.path.join(HERE, sub), exist_ok=True)
    rel = os.path.join(sub, name + (".log.gz" if compress else ".log"))
    path = os.path.join(HERE, rel)
    if isinstance(data, str):
        data = data.encode()
    if compress:
        with open(path, "wb") as f:
            # mtime=0 keeps the archive byte-identical between runs.
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
                g.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    labels.append((rel, cls, status, facts, split))


def run(cmd, env=None, preexec=None, timeout=60, cwd=WORK):
    e = dict(os.environ, PYTHONUNBUFFERED="1", LC_ALL="C")
    if env:
        e.update(env)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                       preexec_fn=preexec, timeout=timeout, cwd=cwd)
    return p.stdout, p.returncode


def py(code, **kw):
    return run([PY, "-c", code], **kw)


def train_prelude(rng, steps):
    """Python source printing a plausible training prologue and progress."""
    lr = rng.choice(["1e-3", "3e-4", "5e-5", "2e-4"])
    bs = rng.choice([8, 16, 32, 64])
    return (
        "import sys, random\n"
        "random.seed(%d)\n"
        "print('config: lr=%s batch_size=%d epochs=3 model=mlp-%d')\n"
        "loss = 2.5\n"
        "for step in range(%d):\n"
        "    loss *= 0.995 + random.random() * 0.004\n"
        "    if step %% 10 == 0: print(f'step {step:5d} loss={loss:.4f} lr=%s')\n"
        % (rng.randrange(1000), lr, bs, rng.choice([2, 4, 8]), steps, lr))


# ---------------------------------------------------------------- real runs
C_SOURCES = {
    "segv_null": r'''#include <stdio.h>
int main(int c, char**v){ printf("loading model shard %d\n", c); fflush(stdout);
 int *p = (int*)(long)(c - 1); return *p; }''',
    "segv_stack": r'''#include <stdio.h>
int f(int n){ volatile char b[4096]; b[0]=(char)n; return f(n+1)+b[0]; }
int main(){ printf("building index\n"); fflush(stdout); return f(0); }''',
    "abort_plain": r'''#include <stdio.h>
#include <stdlib.h>
int main(){ printf("validating checkpoint\n"); fprintf(stderr, "fatal: inconsistent state\n"); abort(); }''',
    "assert_c": r'''#include <assert.h>
#include <stdio.h>
int main(int c, char**v){ printf("batch of %d tensors\n", c); fflush(stdout); assert(c == 7 && "tensor count"); return 0; }''',
    "fpe": r'''#include <stdio.h>
int main(int c, char**v){ int zero = c - 1; printf("computing mean over %d samples\n", zero); fflush(stdout);
 return 100 / zero; }''',
    "exit3": r'''#include <stdio.h>
int main(){ fprintf(stderr, "usage error: expected --config\n"); return 3; }''',
}
CXX_SOURCES = {
    "throw_logic": r'''#include <stdexcept>
#include <cstdio>
int main(){ std::puts("starting scheduler"); std::fflush(stdout); throw std::logic_error("invalid schedule state"); }''',
    "bad_alloc": r'''#include <cstdio>
#include <vector>
int main(){ std::puts("allocating replay buffer"); std::fflush(stdout);
 std::vector<std::vector<char>> v; for(;;) v.emplace_back(size_t(1)<<30, 1); }''',
}


def build_programs():
    out = {}
    for name, src in C_SOURCES.items():
        path = os.path.join(WORK, name)
        with open(path + ".c", "w") as f:
            f.write(src)
        subprocess.run(["cc", "-O0", "-w", "-o", path, path + ".c"], check=True)
        out[name] = path
    for name, src in CXX_SOURCES.items():
        path = os.path.join(WORK, name)
        with open(path + ".cpp", "w") as f:
            f.write(src)
        subprocess.run(["c++", "-O0", "-w", "-o", path, path + ".cpp"], check=True)
        out[name] = path
    return out


def limit_as(mb):
    import resource
    def f():
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return f


def no_core():
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def real_runs(rng):
    progs = build_programs()
    n = 0

    def add(cls, out_rc, facts="-", split="train"):
        nonlocal n
        out, rc = out_rc
        if (rc == 0) != (cls in ("success", "nan_loss")) and cls != "nan_loss":
            raise SystemExit("generate.py: %s run ended with status %d, not as intended:\n%s" % (cls, rc, out.decode()[-500:]))
        n += 1
        record("%s_%03d" % (cls, n), cls, out, status_of(rc), facts, split)

    for i in range(8):
        pre = train_prelude(rng, rng.randrange(20, 200))
        # segfault: Python, with and without faulthandler, and C programs
        add("segfault", py(pre + "import ctypes\nprint('last line before the crash')\nctypes.string_at(0)\n",
                           preexec=no_core))
        add("segfault", run([PY, "-X", "faulthandler", "-c", pre + "import ctypes\nctypes.string_at(%d)\n" % i],
                            preexec=no_core), split="heldout" if i % 2 else "train")
        add("abort", run([progs["abort_plain"]], preexec=no_core))
        add("abort", run([progs["throw_logic"]], preexec=no_core), split="heldout" if i % 2 else "train")
        add("div_zero", py(pre + "vals = []\nprint('mean', sum(vals) / len(vals))\n"))
        add("file_not_found", py(pre + "open('/data/run%d/train_%d.parquet').read()\n" % (i, rng.randrange(99))))
        add("missing_module", py(pre + "import %s\n" % rng.choice(["torchvision_nightly", "apex", "flash_attn", "deepspeed_x", "transformerz"])))
        add("permission", py(pre + "open('/root/.secret_ckpt_%d', 'w').write('x')\n" % i,
                             preexec=lambda: (os.setgid(65534), os.setuid(65534))))
        add("ram_oom", py(pre + "import numpy as np\nx = np.ones((%d, 1024, 1024), dtype=np.float32)\n" % (4096 + i),
                          preexec=limit_as(1024)))
        add("nan_loss", py(pre + "import math\nfor e in range(3):\n    print(f'epoch {e} loss=nan acc=0.10')\n"))
        add("assertion", py(pre + "shape = (%d, 3)\nassert shape[1] == 4, f'bad shape {shape}'\n" % (i + 2)))
        add("runtime_error", py(pre + "raise RuntimeError('mat1 and mat2 shapes cannot be multiplied (%dx3 and 4x5)')\n" % (i + 2)))
        add("traceback", py(pre + "d = {}\nprint(d['%s'])\n" % rng.choice(["lr", "model", "seed", "optim"])))
        add("killed", py(pre + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"))
        add("time_limit", py(pre + "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"))
        add("success", py(pre + "print('saved checkpoint to ckpt/final.pt')\nprint('done')\n"))
        add("unknown", py(pre + "import sys\nprint('evaluation finished with errors')\nsys.exit(%d)\n" % (1 + i % 3)))

    for i in range(4):
        held = "heldout" if i >= 2 else "train"
        add("segfault", run([progs["segv_null"]], preexec=no_core), split=held)
        add("segfault", run([progs["segv_stack"]], preexec=limit_as(512)), split=held)
        add("assertion", run([progs["assert_c"]], preexec=no_core), split=held)
        add("div_zero", run([progs["fpe"]], preexec=no_core), split=held)
        add("ram_oom", run([progs["bad_alloc"]], preexec=limit_as(2048 + 256 * i)), split=held)
        add("unknown", run([progs["exit3"]]), split=held)
        add("file_not_found", run(["sh", "-c", "echo preparing; cat /nonexistent/config_%d.yaml" % i]), split=held)
        add("file_not_found", run(["sh", "-c", "echo stage 2; run_stage_%d --fast" % i]), split=held)
        add("missing_module", py("import ctypes\nprint('probing CUDA')\nctypes.CDLL('libcufile.so.%d')\n" % (90 + i)), split=held)
        add("permission", run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "sh", "-c", "echo writing results; mkdir /var/results_%d" % i]), split=held)
        add("killed", py("import os, signal, time\nprint('waiting for batch')\nos.kill(os.getpid(), signal.%s)\n"
                         % ["SIGINT", "SIGHUP", "SIGUSR1", "SIGQUIT"][i], preexec=no_core), split=held)
        add("nan_loss", py(train_prelude(rng, 50) +
                           "import numpy as np\nw = np.float32(1.0)\n"
                           "for s in range(60):\n    w = w * np.float32(1e8)\n    l = w * w\n"
                           "    print(f'iter {s} loss: {l}')\n    if not np.isfinite(l):\n"
                           "        raise ValueError(f'Loss is {l}, stopping training')\n"), split=held)

    # disk_full: a real, tiny tmpfs filled up
    mnt = os.path.join(WORK, "tmpfs")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt], check=True)
    try:
        for i in range(10):
            held = "heldout" if i >= 7 else "train"
            for f in os.listdir(mnt):
                os.unlink(os.path.join(mnt, f))
            if i % 2 == 0:
                add("disk_full", py(train_prelude(rng, 40) +
                                    "with open('%s/ckpt_%d.pt', 'wb') as f:\n    f.write(b'x' * (1 << 20))\n" % (mnt, i)),
                    split=held)
            else:
                add("disk_full", run(["sh", "-c", "echo dumping features; dd if=/dev/zero of=%s/f%d bs=64k count=64" % (mnt, i)]),
                    split=held)
    finally:
        subprocess.run(["umount", mnt])

    # oom_killer: a real cgroup memory limit when available; otherwise SIGKILL plus the
    # cgroup evidence recorded as a fact.
    for i in range(10):
        held = "heldout" if i >= 7 else "train"
        code = train_prelude(rng, 30) + "import os, signal\nprint('allocating activations')\nos.kill(os.getpid(), signal.SIGKILL)\n"
        out, rc = py(code)
        if i % 2:
            out += ("slurmstepd: error: Detected 1 oom_kill event in StepId=%d.0. Some of the step tasks "
                    "have been OOM Killed.\n" % (400000 + i)).encode()
            add("oom_killer", (out, rc), split=held)
        else:
            add("oom_killer", (out, rc), facts="oom_kill", split=held)
    return n


# ---------------------------------------------------------------- synthetic long logs
GPUS = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L40S"]


def tqdm_line(rng, desc, total, width=30):
    """One terminal line redrawn many times with carriage returns, as tqdm does."""
    parts = []
    for i in range(0, total + 1, max(1, total // rng.randrange(8, 20))):
        frac = i / total
        bar = "#" * int(frac * width) + " " * (width - int(frac * width))
        parts.append("\r%s: %3d%%|%s| %d/%d [00:%02d<00:%02d, %.2fit/s]" %
                     (desc, int(frac * 100), bar, i, total, i % 60, (total - i) % 60, rng.uniform(2, 9)))
    return "".join(parts) + "\n"


def progress_block(rng, ranks, lines, start_step=0):
    out = []
    step = start_step
    loss = rng.uniform(2, 4)
    for _ in range(lines):
        r = rng.randrange(ranks)
        pre = "[rank%d]: " % r if ranks > 1 else ""
        k = rng.random()
        if k < 0.05:
            out.append(pre + tqdm_line(rng, "Epoch %d" % (step // 500), rng.choice([100, 250, 500])))
        elif k < 0.08:
            out.append(pre + "NCCL INFO Channel %02d/0 : %d[%d] -> %d[%d] via P2P/IPC\n" %
                       (rng.randrange(32), r, r, (r + 1) % ranks, (r + 1) % ranks))
        elif k < 0.10:
            out.append(pre + "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly\n")
        else:
            loss *= rng.uniform(0.995, 1.002)
            out.append(pre + "step %6d | loss %.4f | lr %.2e | grad_norm %.3f | %.1f samples/s\n" %
                       (step, loss, rng.uniform(1e-5, 3e-4), rng.uniform(0.2, 3.0), rng.uniform(50, 900)))
            step += 1
    return out, step


def header(rng, ranks):
    gpu = rng.choice(GPUS)
    out = ["Python 3.10.12, torch 2.%d.%d+cu12%d\n" % (rng.randrange(1, 5), rng.randrange(3), rng.randrange(1, 5)),
           "world_size=%d backend=nccl master_addr=node%03d\n" % (ranks, rng.randrange(200))]
    for r in range(ranks):
        out.append("[rank%d]: Using device cuda:%d (%s)\n" % (r, r % 8, gpu))
    out.append("NCCL version 2.%d.%d+cuda12.%d\n" % (rng.randrange(14, 21), rng.randrange(9), rng.randrange(5)))
    return out, gpu


def traceback(rng, frames, final):
    out = ["Traceback (most recent call last):\n"]
    for f in frames:
        out.append('  File "%s", line %d, in %s\n' % (f[0], rng.randrange(20, 900), f[1]))
        out.append("    %s\n" % f[2])
    out.append(final + "\n")
    return out


TRAIN_FRAMES = [("/work/train.py", "<module>", "main(args)"),
                ("/work/train.py", "main", "trainer.fit(model, loader)"),
                ("/work/trainer.py", "fit", "loss = self.training_step(batch)"),
                ("/work/trainer.py", "training_step", "out = self.model(**batch)")]


def torchrun_summary(rng, rank, exitcode):
    return ["Traceback (most recent call last):\n",
            '  File "/usr/local/bin/torchrun", line 8, in <module>\n',
            "    sys.exit(main())\n",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
            "============================================================\n",
            "train.py FAILED\n",
            "------------------------------------------------------------\n",
            "Root Cause (first observed failure):\n",
            "[0]:\n  time      : 2026-%02d-%02d_%02d:%02d:%02d\n" % (rng.randrange(1, 13), rng.randrange(1, 28),
                                                               rng.randrange(24), rng.randrange(60), rng.randrange(60)),
            "  host      : gpu-node%03d\n  rank      : %d (local_rank: %d)\n" % (rng.randrange(300), rank, rank % 8),
            "  exitcode  : %d (pid: %d)\n" % (exitcode, rng.randrange(1000, 99999)),
            "============================================================\n"]


def error_lines(cls, rng, variant, gpu, ranks):
    r = rng.randrange(ranks)
    pre = "[rank%d]: " % r if ranks > 1 else ""
    gib = rng.choice([2.0, 1.5, 512 / 1024, 4.0, 20.0])
    if cls == "cuda_oom":
        finals = [
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity of 79.15 GiB of which %.2f GiB is free. Including non-PyTorch memory, this process has 78.20 GiB memory in use." % (gib, r % 8, rng.uniform(0.1, 0.9)),
            "RuntimeError: CUDA out of memory. Tried to allocate %d.00 MiB (GPU %d; 39.59 GiB total capacity; 37.12 GiB already allocated; %d.19 MiB free; 38.00 GiB reserved in total by PyTorch)" % (rng.randrange(20, 900), r % 8, rng.randrange(1, 90)),
            "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        ]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "nccl":
        finals = [
            "[E ProcessGroupNCCL.cpp:%d] [Rank %d] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, NumelIn=%d, Timeout(ms)=600000) ran for 600%03d milliseconds before timing out." % (rng.randrange(400, 1600), r, rng.randrange(1000, 90000), rng.randrange(10**5, 10**8), rng.randrange(1000)),
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:%d, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\nncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error." % rng.randrange(1000, 2000),
            "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:%d, remote process exited or there was a network error, NCCL version 2.19.3\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely." % rng.randrange(100, 400),
            "gpu-node%03d:%d:%d [%d] NCCL INFO [Service thread] Connection closed by localRank %d\n[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or timed out. To avoid data inconsistency, we are taking the entire process down.\nNCCL communicator was aborted on rank %d." % (rng.randrange(300), rng.randrange(9999), rng.randrange(9999), r, r, r),
        ]
        f = finals[variant % len(finals)]
        return [pre + l + "\n" for l in f.split("\n")] if variant % 2 == 0 else [pre + l for l in traceback(rng, TRAIN_FRAMES[:3], f)]
    if cls == "cuda_runtime":
        finals = [
            "RuntimeError: CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
            "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
        ]
        extra = ["/pytorch/aten/src/ATen/native/cuda/Loss.cu:%d: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [%d,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" % (rng.randrange(200, 300), rng.randrange(32))] if variant % 5 == 0 else []
        return extra + [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "device_mismatch":
        finals = [
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:%d and cpu!" % (r % 8),
            "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:%d! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)" % (1 + r % 7),
            "RuntimeError: Expected object of device type cuda but got device type cpu for argument #1 'self' in call to _th_index_select",
        ]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "gpu_hardware":
        finals = [
            "[%d.%06d] NVRM: Xid (PCI:0000:%02x:00): 79, pid=%d, GPU has fallen off the bus." % (rng.randrange(10**5, 10**6), rng.randrange(10**6), rng.randrange(256), rng.randrange(9999)),
            "RuntimeError: CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported at some other API call.",
            "[%d.%06d] NVRM: Xid (PCI:0000:%02x:00): 48, pid=%d, An uncorrectable double bit error (DBE) has been detected on GPU." % (rng.randrange(10**5, 10**6), rng.randrange(10**6), rng.randrange(256), rng.randrange(9999)),
            "RuntimeError: CUDA error: unspecified launch failure",  # with an Xid recorded by NVML
            "Unable to determine the device handle for GPU 0000:%02x:00.0: GPU is lost.  Reboot the system to recover this GPU" % rng.randrange(256),
        ]
        f = finals[variant % len(finals)]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, f)] if f.startswith("RuntimeError") else [l + "\n" for l in f.split("\n")]
    if cls == "nan_loss":
        finals = [
            "step %6d | loss nan | lr 3.00e-04 | grad_norm nan" % rng.randrange(1000, 90000),
            "ValueError: Loss is NaN at step %d, aborting" % rng.randrange(1000, 90000),
            "WARNING: non-finite loss detected (inf), skipping batch %d" % rng.randrange(1000, 90000),
            "Epoch %d: train_loss=nan val_loss=nan" % rng.randrange(1, 40),
        ]
        f = finals[variant % len(finals)]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, f)] if f.startswith("ValueError") else [pre + f + "\n"] * rng.randrange(1, 5)
    if cls == "ram_oom":
        finals = [
            "numpy.core._exceptions._ArrayMemoryError: Unable to allocate %.1f GiB for an array with shape (%d, 224, 224, 3) and data type float32" % (rng.uniform(10, 200), rng.randrange(10000, 900000)),
            "RuntimeError: [enforce fail at alloc_cpu.cpp:%d] . DefaultCPUAllocator: can't allocate memory: you tried to allocate %d bytes. Error code 12 (Cannot allocate memory)" % (rng.randrange(70, 120), rng.randrange(10**10, 10**12)),
            "MemoryError",
        ]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "oom_killer":
        return ["slurmstepd: error: Detected %d oom_kill event in StepId=%d.batch. Some of the step tasks have been OOM Killed.\n" % (rng.randrange(1, 4), rng.randrange(10**5, 10**7))]
    if cls == "time_limit":
        return ["slurmstepd: error: *** JOB %d ON gpu-node%03d CANCELLED AT 2026-%02d-%02dT%02d:%02d:%02d DUE TO TIME LIMIT ***\n" %
                (rng.randrange(10**5, 10**7), rng.randrange(300), rng.randrange(1, 13), rng.randrange(1, 28), rng.randrange(24), rng.randrange(60), rng.randrange(60))]
    if cls == "missing_module":
        mod = rng.choice(["flash_attn", "apex", "bitsandbytes", "xformers", "megatron"])
        finals = ["ModuleNotFoundError: No module named '%s'" % mod,
                  "ImportError: %s.so: cannot open shared object file: No such file or directory" % rng.choice(["libnccl", "libcudnn_ops_infer", "libcublasLt"]),
                  "ImportError: cannot import name 'scaled_dot_product_attention' from '%s' (/opt/conda/lib/python3.10/site-packages/%s/__init__.py)" % (mod, mod)]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES[:2], finals[variant % len(finals)])]
    if cls == "file_not_found":
        finals = ["FileNotFoundError: [Errno 2] No such file or directory: '/scratch/%s/shard_%05d.tar'" % (rng.choice(["laion", "c4", "imagenet"]), rng.randrange(99999)),
                  "OSError: [Errno 2] No such file or directory: 'checkpoints/step_%d/model.safetensors'" % rng.randrange(1000, 99999)]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES[:3], finals[variant % len(finals)])]
    if cls == "permission":
        finals = ["PermissionError: [Errno 13] Permission denied: '/shared/checkpoints/run_%d/last.pt'" % rng.randrange(999),
                  "OSError: [Errno 1] Operation not permitted: '/proc/sys/vm/drop_caches'"]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES[:3], finals[variant % len(finals)])]
    if cls == "disk_full":
        finals = ["OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_%d.pt'" % rng.randrange(1000, 99999),
                  "RuntimeError: [enforce fail at inline_container.cc:%d] . PytorchStreamWriter failed writing file data/%d: file write failed\nOSError: [Errno 122] Disk quota exceeded" % (rng.randrange(300, 700), rng.randrange(999))]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES[:3], finals[variant % len(finals)])]
    if cls == "assertion":
        finals = ["AssertionError: sequence length %d exceeds max_position_embeddings %d" % (rng.randrange(4097, 9000), 4096),
                  "AssertionError"]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "runtime_error":
        finals = ["RuntimeError: The size of tensor a (%d) must match the size of tensor b (%d) at non-singleton dimension 1" % (rng.randrange(100, 900), rng.randrange(100, 900)),
                  "RuntimeError: Error(s) in loading state_dict for GPT:\n\tMissing key(s) in state_dict: \"lm_head.weight\".",
                  "RuntimeError: DataLoader worker (pid(s) %d) exited unexpectedly" % rng.randrange(1000, 99999)]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "traceback":
        finals = ["KeyError: 'input_ids'", "ValueError: too many values to unpack (expected 2)",
                  "TypeError: forward() got an unexpected keyword argument 'attention_mask'",
                  "IndexError: index %d is out of bounds for dimension 0 with size %d" % (rng.randrange(64, 99), 64)]
        return [pre + l for l in traceback(rng, TRAIN_FRAMES, finals[variant % len(finals)])]
    if cls == "segfault":
        return ["Fatal Python error: Segmentation fault\n", "\n", "Thread 0x%012x (most recent call first):\n" % rng.randrange(2**40),
                '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/worker.py", line 302 in _worker_loop\n']
    if cls == "abort":
        return ["terminate called after throwing an instance of 'c10::Error'\n",
                "  what():  [enforce fail at tensor.cpp:%d] Tensor is not initialized\n" % rng.randrange(100, 999)]
    if cls == "div_zero":
        return [pre + l for l in traceback(rng, TRAIN_FRAMES[:3], "ZeroDivisionError: division by zero")]
    if cls == "hang":
        return []
    if cls == "killed":
        return []
    if cls == "unknown":
        return ["error: evaluation harness returned %d failures\n" % rng.randrange(1, 30)]
    if cls == "success":
        return ["Training complete. Best val loss %.4f at epoch %d\n" % (rng.uniform(0.1, 2), rng.randrange(1, 40)),
                "Saved final checkpoint to checkpoints/final.safetensors\n"]
    raise ValueError(cls)


# class -> (status, facts) per variant
SYNTH = {
    "cuda_oom": lambda v: ("exit:1", "-"),
    "nccl": lambda v: (["exit:1", "signal:SIGABRT", "exit:1", "exit:134"][v % 4], "-"),
    "cuda_runtime": lambda v: (["exit:1", "signal:SIGABRT"][v % 2], "-"),
    "device_mismatch": lambda v: ("exit:1", "-"),
    "gpu_hardware": lambda v: (["exit:1", "signal:SIGKILL", "exit:1", "exit:1", "exit:255"][v % 5],
                               ["-", "-", "-", "xid:79", "-"][v % 5]),
    "nan_loss": lambda v: (["exit:0", "exit:1", "exit:0", "exit:0"][v % 4], "-"),
    "ram_oom": lambda v: ("exit:1", "-"),
    "oom_killer": lambda v: ("signal:SIGKILL", "-"),
    "time_limit": lambda v: (["signal:SIGTERM", "exit:143", "signal:SIGTERM"][v % 3], ["-", "-", "terminated"][v % 3]),
    "missing_module": lambda v: ("exit:1", "-"),
    "file_not_found": lambda v: ("exit:1", "-"),
    "permission": lambda v: ("exit:1", "-"),
    "disk_full": lambda v: ("exit:1", "-"),
    "assertion": lambda v: ("exit:1", "-"),
    "runtime_error": lambda v: ("exit:1", "-"),
    "traceback": lambda v: ("exit:1", "-"),
    "segfault": lambda v: (["signal:SIGSEGV", "exit:139"][v % 2], "-"),
    "abort": lambda v: ("signal:SIGABRT", "-"),
    "div_zero": lambda v: ("exit:1", "-"),
    "hang": lambda v: ("signal:SIGTERM", "hang_killed"),
    "killed": lambda v: (["signal:SIGKILL", "signal:SIGINT", "exit:137"][v % 3], "-"),
    "unknown": lambda v: (["exit:1", "exit:2", "exit:3"][v % 3], "-"),
    "success": lambda v: ("exit:0", "-"),
}


def synth_log(cls, rng, variant, long):
    ranks = rng.choice([1, 2, 4, 8])
    out, gpu = header(rng, ranks)
    before = rng.randrange(1500, 3000) if long else rng.randrange(30, 300)
    block, step = progress_block(rng, ranks, before)
    out += block
    err = error_lines(cls, rng, variant, gpu, ranks)
    if cls in ("hang",):
        out += progress_block(rng, ranks, 50, step)[0]
        return "".join(out)
    out += err
    if cls == "success":
        return "".join(out)
    # The error is early: other ranks keep printing and the launcher reports at length.
    after = rng.randrange(80, 400) if long else rng.randrange(0, 30)
    if cls not in ("oom_killer", "time_limit", "nan_loss"):
        out += progress_block(rng, ranks, after, step)[0]
        if ranks > 1 and cls not in ("segfault", "abort", "killed", "unknown"):
            out += torchrun_summary(rng, rng.randrange(ranks), 1)
    elif cls == "nan_loss" and variant % 4 != 1:
        out += ["step %6d | loss nan | lr 3.00e-04 | grad_norm nan\n" % (step + k) for k in range(after)]
    return "".join(out)


def synth_runs(rng):
    count = 0
    for cls, status_fn in SYNTH.items():
        per_class = 12 if cls in ("cuda_oom", "nccl", "cuda_runtime", "device_mismatch", "gpu_hardware", "hang") else 6
        for i in range(per_class):
            variant = i
            status, facts = status_fn(variant)
            long = i % 3 == 0
            # The last variants of each class are held out.
            split = "heldout" if i >= per_class - max(2, per_class // 4) else "train"
            record("%s_%02d" % (cls, i), cls, synth_log(cls, rng, variant, long), status, facts, split, compress=True)
            count += 1
    return count


# Added after the others with a seed of its own, so that adding it left every earlier log
# byte-identical. Status per variant: a Python exception exits 1; TensorFlow's and JAX's
# "no GPU" paths often end in an abort.
CUDA_UNAVAILABLE_FINALS = [
    "AssertionError: Torch not compiled with CUDA enabled",
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
    "RuntimeError: No CUDA GPUs are available",
    "RuntimeError: CUDA error: no CUDA-capable device is detected\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "ImportError: libcudart.so.%d.0: cannot open shared object file: No such file or directory",
    "RuntimeError: The NVIDIA driver on your system is too old (found version %d). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
]


def cuda_unavailable_runs():
    rng = random.Random(20261203)
    for i, final in enumerate(CUDA_UNAVAILABLE_FINALS):
        if "%d" in final:
            final = final % (rng.choice([11, 12]) if "libcudart" in final else rng.choice([11040, 11060, 12020]))
        ranks = rng.choice([1, 2, 4])
        out = header(rng, ranks)[0][:2]  # the versions and the world; no device was found
        out += progress_block(rng, ranks, rng.randrange(0, 40) if i % 2 else 0)[0]
        frames = TRAIN_FRAMES[:2] if final.startswith("ImportError") else TRAIN_FRAMES
        out += traceback(rng, frames, final)
        if ranks > 1:
            out += torchrun_summary(rng, rng.randrange(ranks), 1)
        split = "heldout" if i >= len(CUDA_UNAVAILABLE_FINALS) - 2 else "train"
        record("cuda_unavailable_%02d" % i, "cuda_unavailable", "".join(out), "exit:1", "-", split, compress=True)
    return len(CUDA_UNAVAILABLE_FINALS)


def main():
    if os.geteuid() != 0:
        sys.exit("generate.py: run as root (it mounts a tmpfs and drops privileges)")
    for sub in ("real", "synth"):
        shutil.rmtree(os.path.join(HERE, sub), ignore_errors=True)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    rng = random.Random(20261130)
    n_real = real_runs(rng)
    n_synth = synth_runs(rng) + cuda_unavailable_runs()
    with open(os.path.join(HERE, "labels.tsv"), "w") as f:
        f.write("# file\tclass\tstatus\tfacts\tsplit  (generated by generate.py)\n")
        for row in labels:
            f.write("\t".join(row) + "\n")
    shutil.rmtree(WORK, ignore_errors=True)
    print("corpus: %d real, %d synthetic, %d total" % (n_real, n_synth, len(labels)))


if __name__ == "__main__":
    main()

"""Ctrl-C at random moments: 200 SIGINTs sent to training interpreters inside a step, between
steps, during a checkpoint save and during interpreter exit. Every interrupted run must leave a
consistent trainer (steps == updates, finite parameters) and a checkpoint that loads into a fresh
trainer bit for bit; no run may crash. The moments are drawn from a seed that every failure names
(MEGANEURA_INTERRUPT_SEED=<n> replays a run)."""
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np

import meganeura as mn

from conftest import BUILD

CHILDREN = 20  # interpreters, each interrupted ROUNDS times while running and once while exiting
ROUNDS = 9
AT_ONCE = 4  # children run side by side to keep the test to seconds
PHASES = {"t": "train", "l": "loop", "s": "save"}
# Upper bound of the random delay after the child says it entered a phase (seconds).
DELAY = {"t": 0.03, "l": 0.03, "s": 0.03, "x": 0.05}

CHILD = textwrap.dedent("""
    import signal, sys
    # Whatever the parent's SIGINT disposition (a shell's background job ignores it), Ctrl-C
    # raises KeyboardInterrupt here, as in an interactive interpreter.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import meganeura as mn

    out, phases = sys.argv[2], sys.argv[3]

    def make():
        g = mn.Graph()
        x = g.input("x", (128, 128)); y = g.input("labels", (128,), dtype="i32")
        w = g.parameter("w", (128, 128), mn.Init.normal(0.05))
        v = g.parameter("v", (128, 10), mn.Init.normal(0.05))
        loss = mn.cross_entropy(mn.relu(x @ w) @ v, y)
        # Two threads: the CPU pool's worker runs part of every matmul.
        return mn.Trainer(g, loss, mn.Optimizer("adamw", lr=1e-3), device="cpu", threads=2, seed=1)

    rng = np.random.default_rng(0)
    batch = {"x": rng.standard_normal((128, 128), dtype=np.float32),
             "labels": rng.integers(0, 10, 128).astype(np.int32)}
    t, fresh = make(), make()
    t.step(batch)
    names = [n for n, b in t.session.buffers().items() if b["role"] in ("parameter", "state")]

    def phase(kind, r):
        if kind == "t":
            t.train(10**9, feed=lambda step: batch)
        elif kind == "l":
            while True:
                t.step(batch)
                float(np.float32(t.steps))  # Python work between steps
        else:
            while True:
                t.session.save_checkpoint(f"{out}/saving.safetensors", {"round": str(r)})

    for r, kind in enumerate(phases):
        try:
            print("phase", r, kind, flush=True)
            phase(kind, r)
        except KeyboardInterrupt:
            pass
        # Consistent: every step taken was a whole update, and the parameters are finite.
        assert t.steps == t.updates, (t.steps, t.updates)
        params = {n: t.session.get(n) for n in names}
        assert all(np.isfinite(a).all() for a in params.values())
        if kind == "s":  # a save interrupted or not: the file is whole
            fresh.session.load_checkpoint(f"{out}/saving.safetensors")
            assert fresh.updates == t.updates
        path = f"{out}/round{r}.safetensors"
        t.session.save_checkpoint(path)
        fresh.session.load_checkpoint(path)
        for n in names:
            assert np.array_equal(fresh.session.get(n), params[n]), n
        print("ok", r, t.steps, flush=True)
    t.step(batch)
    t.session.save_checkpoint(f"{out}/last.safetensors")
    print("exit", t.updates, flush=True)
    # The interpreter now ends with both trainers alive: its finalisation destroys them.
""")


def run_child(index, phases, rng, tmp, failures, seed):
    out = tmp / f"child{index}"
    out.mkdir()
    where = f"seed {seed}, child {index}, phases {phases}"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(BUILD / "python"), str(out), phases],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        last = None
        for line in p.stdout:
            words = line.split()
            if words[0] == "phase":
                time.sleep(rng.uniform(0, DELAY[words[2]]))
                p.send_signal(signal.SIGINT)
            elif words[0] == "exit":
                last = int(words[1])
                time.sleep(rng.uniform(0, DELAY["x"]))
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
        err = p.stderr.read()
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        failures.append(f"{where}: did not end within 60 s")
        return
    # Ended by the signal during exit (-SIGINT), or with an "ignored" KeyboardInterrupt (0, 1); never
    # a crash (SIGSEGV, SIGABRT) or a fatal error.
    if last is None or rc not in (0, 1, -signal.SIGINT) or "Fatal Python error" in err or "corrupted" in err:
        failures.append(f"{where}: exit status {rc}, last update {last}\n{err[-3000:]}")
        return
    # The checkpoint written just before the exit loads, with the state of that moment.
    g = mn.Graph()
    x = g.input("x", (128, 128))
    y = g.input("labels", (128,), dtype="i32")
    w = g.parameter("w", (128, 128), mn.Init.normal(0.05))
    v = g.parameter("v", (128, 10), mn.Init.normal(0.05))
    t = mn.Trainer(g, mn.cross_entropy(mn.relu(x @ w) @ v, y), mn.Optimizer("adamw", lr=1e-3), device="cpu",
                   threads=2)
    t.session.load_checkpoint(out / "last.safetensors")
    if t.updates != last:
        failures.append(f"{where}: the last checkpoint holds {t.updates} updates, the child took {last}")


def test_two_hundred_interrupts_at_random_moments_leave_consistent_state(tmp_path):
    seed = int(os.environ.get("MEGANEURA_INTERRUPT_SEED", random.SystemRandom().randrange(2**32)))
    print(f"interrupt stress test: seed {seed} (MEGANEURA_INTERRUPT_SEED={seed} replays it)")
    master = random.Random(seed)
    plans = [("".join(master.choice("tls") for _ in range(ROUNDS)), random.Random(master.random()))
             for _ in range(CHILDREN)]
    failures = []
    begin = time.monotonic()
    for first in range(0, CHILDREN, AT_ONCE):
        threads = [threading.Thread(target=run_child, args=(i, *plans[i], tmp_path, failures, seed))
                   for i in range(first, min(first + AT_ONCE, CHILDREN))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    sent = CHILDREN * (ROUNDS + 1)
    assert not failures, f"{len(failures)} of {CHILDREN} interpreters failed (seed {seed}):\n" + "\n".join(failures)
    print(f"interrupt stress test: {sent}/{sent} interrupts survived in {time.monotonic() - begin:.1f} s")
    assert sent == 200

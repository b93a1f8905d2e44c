"""Training from NumPy: the mlp to >= 97% test accuracy, the Trainer's API, gradient
accumulation, and Ctrl-C stopping a long train() cleanly."""
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import meganeura as mn

from conftest import BUILD

BATCH = 64


def mlp_loss_graph():
    """The CLI's mlp task: x [64, 16], labels [64] (int32), cross-entropy of the mlp's logits."""
    g = mn.Graph()
    x = g.input("x", (BATCH, 16))
    y = g.input("labels", (BATCH,), dtype="i32")
    return g, mn.cross_entropy(mn.models.mlp(g, x), y)


def mlp_optimizer(steps):
    return mn.Optimizer("adamw", lr=3e-3, weight_decay=1e-4, warmup_steps=30, total_steps=steps, min_lr=1e-4)


def batches(x, y, seed=0):
    """feed(step) -> the step's batch: epoch-wise shuffles drawn by NumPy."""
    per_epoch = len(x) // BATCH
    orders = {}

    def feed(step):
        epoch, k = divmod(step, per_epoch)
        if epoch not in orders:
            orders[epoch] = np.random.default_rng(seed * 1000 + epoch).permutation(len(x))
        idx = orders[epoch][k * BATCH:(k + 1) * BATCH]
        return {"x": x[idx], "labels": y[idx]}

    return feed


def test_mlp_trains_from_numpy_to_97_percent():
    x, y = mn.models.synthetic_classification(4096, 0)
    tx, ty = mn.models.synthetic_classification(2048, 1)
    assert x.dtype == np.float32 and y.dtype == np.int32 and x.shape == (4096, 16)
    g, loss = mlp_loss_graph()
    trainer = mn.Trainer(g, loss, mlp_optimizer(600), device="cpu", seed=1)
    seen = []
    losses = trainer.train(600, feed=batches(x, y), callback=lambda step, l: seen.append((step, l)))
    assert losses.shape == (600,) and losses.dtype == np.float32
    assert [s for s, _ in seen] == list(range(600)) and seen[-1][1] == losses[-1]
    assert trainer.steps == 600 and trainer.updates == 600
    assert losses[:20].mean() > 1.0 and losses[-50:].mean() < 0.1
    # Inference program in the same session: it reads the trained parameters by name.
    e = mn.Graph()
    e.output("test_logits", mn.models.mlp(e, e.input("test_x", (2048, 16))))
    session = trainer.session
    program = session.add(e)
    logits = session.run({"test_x": tx}, program=program)["test_logits"]
    accuracy = (logits.argmax(1) == ty).mean()
    assert accuracy >= 0.97, accuracy


def test_trainer_api_and_accumulation():
    x, y = mn.models.synthetic_classification(512, 0)
    g, loss = mlp_loss_graph()
    opt = mn.Optimizer("sgd", lr=0.05, momentum=0.9, accumulation=2)
    opt.clip_norm = 1.0
    assert (opt.kind, opt.lr, opt.momentum, opt.accumulation, opt.clip_norm) == ("sgd", 0.05, 0.9, 2, 1.0)
    opt.kind = "adam"
    assert "adam" in repr(opt)
    opt.kind = "sgd"
    for field in ("lr", "momentum", "accumulation", "nesterov", "beta1", "beta2", "eps", "weight_decay",
                  "warmup_steps", "total_steps", "min_lr"):
        setattr(opt, field, getattr(opt, field))
    trainer = mn.Trainer(g, loss, opt, device="cpu")
    assert trainer.optimizer.kind == "sgd" and "loss" in trainer.graph.outputs and "Trainer(" in repr(trainer)
    feed = batches(x, y)
    first = trainer.step(feed(0))
    assert isinstance(first, float) and trainer.updates == 0  # half of an accumulated update
    trainer.step(feed(1))
    assert trainer.updates == 1
    iterator = (feed(i) for i in range(2, 100))
    trainer.train(6, feed=iterator)
    assert trainer.steps == 8 and trainer.updates == 4
    trainer.train(2)  # no feed: the inputs already set
    assert trainer.steps == 10
    with pytest.raises(ValueError, match="steps must be >= 0"):
        trainer.train(-1)
    with pytest.raises(ValueError, match="already has an output named 'loss'"):
        g.output("loss", loss)
        mn.Trainer(g, loss)


INTERRUPTED = textwrap.dedent("""
    import signal, sys, numpy as np
    # Ctrl-C raises KeyboardInterrupt even where the parent ignores SIGINT (a shell's background
    # job does), which the child would inherit and Python would then leave ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[1])
    import meganeura as mn
    g = mn.Graph()
    x = g.input("x", (64, 16)); y = g.input("labels", (64,), dtype="i32")
    t = mn.Trainer(g, mn.cross_entropy(mn.models.mlp(g, x), y), device="cpu", threads=1)
    xs, ys = mn.models.synthetic_classification(64, 0)
    t.step({"x": xs, "labels": ys})
    print("ready", flush=True)
    try:
        t.train(10**9)  # hours: only Ctrl-C ends it
    except KeyboardInterrupt:
        print("interrupted", t.steps, t.updates, flush=True)
    loss = t.step()
    t.session.save_checkpoint(sys.argv[2])
    print("after", t.steps, np.isfinite(loss), flush=True)
""")


def test_ctrl_c_stops_a_long_train_between_steps(tmp_path):
    ckpt = tmp_path / "interrupted.safetensors"
    p = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(BUILD / "python"), str(ckpt)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("interrupted"), out
    _, steps, updates = lines[0].split()
    assert int(steps) > 1 and int(updates) == int(steps)  # stopped on a whole step, state consistent
    assert lines[1] == f"after {int(steps) + 1} True"
    assert time.monotonic() - sent < 30
    g, loss = mlp_loss_graph()
    resumed = mn.Trainer(g, loss, device="cpu")
    resumed.session.load_checkpoint(ckpt)
    assert resumed.updates == int(steps) + 1


def test_vulkan_training_step_matches_the_cpu():
    from conftest import vulkan_device_or_skip

    vulkan_device_or_skip()
    x, y = mn.models.synthetic_classification(64, 0)
    losses = {}
    for device in ("cpu", "vulkan"):
        g, loss = mlp_loss_graph()
        t = mn.Trainer(g, loss, mlp_optimizer(100), device=device, seed=3, cache_dir="-")  # no pipeline cache on disk
        losses[device] = t.train(5, feed=lambda step: {"x": x, "labels": y})
    # Different summation orders (GPU reductions vs the CPU's): agreement to f32 rounding noise.
    np.testing.assert_allclose(losses["vulkan"], losses["cpu"], rtol=1e-4)

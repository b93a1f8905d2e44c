"""Misuse from Python gets an exception naming what was wrong, never a crash: a trainer used from two
threads at once, a graph dropped while its tensors are held, a session used after its trainer is
gone (and a trainer after its session is closed), NumPy arrays freed or resized around a session's
buffers."""
import gc
import threading
import time

import numpy as np
import pytest

import meganeura as mn


def small_trainer(threads=1):
    g = mn.Graph()
    x = g.input("x", (256, 256))
    y = g.input("labels", (256,), dtype="i32")
    w = g.parameter("w", (256, 256), mn.Init.normal(0.05))
    v = g.parameter("v", (256, 10), mn.Init.normal(0.05))
    t = mn.Trainer(g, mn.cross_entropy(mn.relu(x @ w) @ v, y), mn.Optimizer("sgd", lr=0.01), threads=threads)
    rng = np.random.default_rng(0)
    batch = {"x": rng.standard_normal((256, 256), dtype=np.float32), "labels": rng.integers(0, 10, 256).astype(np.int32)}
    return t, batch


def test_a_trainer_used_from_two_threads_at_once_refuses_the_second(tmp_path):
    t, batch = small_trainer()
    t.step(batch)
    stop = threading.Event()
    errors, refused = [], []
    trained = []

    def train():
        try:
            trained.append(t.train(10**9, feed=lambda step: batch, callback=lambda s, l: stop.is_set() and stop_now()))
        except StopIteration:
            pass
        except Exception as e:  # anything else is a failure of the test
            errors.append(e)

    def stop_now():
        raise StopIteration

    worker = threading.Thread(target=train)
    worker.start()
    deadline = time.monotonic() + 20
    calls = [lambda: t.step(batch), lambda: t.train(1), lambda: t.session.run(), lambda: t.session.get("w"),
             lambda: t.session.save_checkpoint(tmp_path / "x.safetensors"), lambda: t.updates]
    while len(refused) < 20 and time.monotonic() < deadline:
        for call in calls:
            try:
                call()
            except RuntimeError as e:
                assert "in use by another thread" in str(e), e
                refused.append(e)
    stop.set()
    worker.join(timeout=30)
    assert not worker.is_alive() and not errors, errors
    assert len(refused) >= 20, f"only {len(refused)} calls met the training thread"
    # Whatever was refused, the trainer's state is whole: every step taken is one update.
    assert t.steps == t.updates
    assert np.isfinite(t.step(batch))


def test_a_graph_dropped_while_its_tensors_are_held_stays_usable():
    def build():
        g = mn.Graph()
        x = g.input("x", (4, 3))
        w = g.parameter("w", (3, 2), mn.Init.normal(0.1))
        return x, mn.relu(x @ w)

    x, y = build()  # the Graph object is gone; the tensors keep what they point into alive
    gc.collect()
    assert y.shape == (4, 2) and y.graph.find("w") is not None
    y.graph.output("y", y * 2.0)
    s = mn.compile(y.graph)
    assert s.run({"x": np.ones((4, 3), np.float32)})["y"].shape == (4, 2)
    # A tensor of that graph combined with another graph's: an error naming the mix-up.
    other = mn.Graph().input("z", (4, 2))
    with pytest.raises(ValueError, match="graph"):
        y + other
    del x, s
    gc.collect()


def test_a_session_outlives_its_trainer_and_a_closed_one_refuses_every_call():
    t, batch = small_trainer()
    t.step(batch)
    s = t.session
    before = s.get("w")
    del t
    gc.collect()
    # The session keeps what it runs on: it still reads, runs and saves.
    assert np.array_equal(s.get("w"), before)
    s.run(batch)
    s.close()
    for call in (lambda: s.get("w"), lambda: s.run(batch), lambda: s.set("x", batch["x"]),
                 lambda: s.save_checkpoint("/tmp/never.safetensors"), lambda: s.buffers(), lambda: s.plan(),
                 lambda: s.inputs(), lambda: s.device_name, lambda: "w" in s):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    # And a trainer whose session was closed refuses to step.
    t2, batch2 = small_trainer()
    t2.session.close()
    for call in (lambda: t2.step(batch2), lambda: t2.train(3), lambda: t2.updates):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    assert "Trainer(" in repr(t2)


def test_numpy_arrays_freed_or_resized_around_session_buffers():
    t, batch = small_trainer()
    s = t.session
    # An input written straight from an array's memory: the session holds its own copy, so the
    # array may be resized (its memory moved and freed) and dropped afterwards.
    x = batch["x"].copy()
    s.set("x", x)
    expected = x.copy()
    x.resize((4,), refcheck=False)
    del x
    gc.collect()
    assert np.array_equal(s.get("x"), expected)
    # A view of another array's memory (not contiguous, then contiguous) goes in the same way.
    base = np.zeros((256, 512), np.float32)
    base[:, ::2] = expected
    s.set("x", base[:, ::2])
    view = base[:, ::2].copy()
    del base
    assert np.array_equal(s.get("x"), view)
    # An output owns its memory apart from the session: resizing it in place is refused by NumPy,
    # and it stays valid after the session and trainer are gone.
    w = s.get("w")
    with pytest.raises(ValueError):
        w.resize((1,))
    alias = w[:2]
    snapshot = alias.copy()
    del t, s
    gc.collect()
    assert np.array_equal(alias, snapshot) and w.shape == (256, 256)
    # A resized array in place of an input: an error naming the shapes.
    t2, batch2 = small_trainer()
    bad = batch2["x"].copy()
    bad.resize((128, 256), refcheck=False)
    with pytest.raises(ValueError, match=r"'x' has shape"):
        t2.step({"x": bad, "labels": batch2["labels"]})
    assert t2.steps == 0 and t2.updates == 0

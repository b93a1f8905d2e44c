"""Graph, Init and Session from Python: building, compiling, arrays in and out, the plan and the
profile as dicts, closing, threads and the GIL."""
import json
import threading
import time

import numpy as np
import pytest

import meganeura as mn


def small_graph():
    g = mn.Graph()
    x = g.input("x", (4, 3))
    w = g.parameter("w", (3, 2), mn.Init.normal(0.5))
    c = g.constant(np.arange(2, dtype=np.float64))
    y = mn.relu(x @ w) + c
    g.output("y", y)
    return g, x, w, y


def test_graph_introspection():
    g, x, w, y = small_graph()
    assert (x.shape, x.dtype, x.rank, x.dim(-1), x.name) == ((4, 3), "f32", 2, 3, "x")
    assert y.name == "" and y.graph is g and isinstance(y.id, int)
    assert repr(x) == "Tensor(%0 'x' f32(4,3))"
    assert [p.name for p in g.parameters()] == ["w"]
    assert g.find("w").id == w.id and g.find("nope") is None
    assert list(g.outputs) == ["y"] and g.outputs["y"].id == y.id
    assert len(g) == 6 and repr(g) == "Graph(6 nodes, 1 outputs)"
    assert "matmul" in g.dump()
    assert json.loads(g.to_json()) == g.to_dict()
    assert isinstance(g.hash(), int) and g.hash() == small_graph()[0].hash()
    s = g.scalar(2.5)
    assert s.shape == () and g.constant([[1, 2]], shape=(2,), dtype="i32").dtype == "i32"
    strided = np.arange(6.0).reshape(2, 3).T  # values are read in its logical (row-major) order
    g.output("t", g.constant(strided) + 0.0)
    np.testing.assert_array_equal(mn.compile(g).run(outputs=["t"])["t"], strided)


def test_init_kinds_and_state_assignment():
    inits = {"zeros": mn.Init.zeros(), "ones": mn.Init.ones(), "normal": mn.Init.normal(0.1),
             "uniform": mn.Init.uniform(0.2), "constant": mn.Init.constant(3.5)}
    g = mn.Graph()
    for name, init in inits.items():
        assert init.kind == name and name in repr(init)
        g.output("out_" + name, g.parameter(name, (500,), init) + 0.0)
    counter = g.state("counter", (), mn.Init.constant(1.0))
    g.assign(counter, counter * 2.0)
    s = mn.compile(g, seed=5)
    out = {k[4:]: v for k, v in s.run().items()}
    assert (out["zeros"] == 0).all() and (out["ones"] == 1).all() and (out["constant"] == 3.5).all()
    assert inits["normal"].a == 0.1 and abs(out["normal"].std() - 0.1) < 0.02
    assert np.abs(out["uniform"]).max() <= 0.2 and out["uniform"].std() > 0.05
    s.run()
    assert s.get("counter") == 4.0  # two steps, each doubling


def test_session_arrays_buffers_plan_and_profile():
    g, *_ = small_graph()
    with mn.Session("cpu", seed=1) as s:
        assert s.add(g) == 0 and s.program_count == 1
        assert s.inputs() == ["x"] and s.outputs() == ["y"]
        assert s.buffers()["w"] == {"role": "parameter", "dtype": "f32", "stored": "f32", "shape": (3, 2)}
        x = np.arange(12, dtype=np.float32).reshape(4, 3)
        s["x"] = x
        s.set("w", np.ones((3, 2), np.float32))
        s.initialise()
        out = s.run()
        np.testing.assert_array_equal(out["y"], np.maximum(x @ np.ones((3, 2)), 0) + np.arange(2))
        assert out["y"].flags.owndata is False and out["y"].base is not None  # the bytes read back, handed over without a copy
        np.testing.assert_array_equal(s["x"], x)
        assert "x" in s and "nope" not in s
        assert s.run(outputs=[]) == {}
        plan = s.plan()
        assert {"dispatches", "tensors", "externals"} <= set(plan) and plan["dispatches"][0]["op"]
        prof = s.profile(runs=3)
        assert prof["runs"] == 3 and len(prof["samples_ms"]) == 3 and prof["median_ms"] > 0
        assert prof["dispatches"] == len(plan["dispatches"]) and sum(o["count"] for o in prof["ops"].values()) == prof["dispatches"]
        assert s.device_name and s.device_note == "" and "cpu" in repr(s).lower()
    assert s.closed and repr(s) == "Session(closed)"
    with pytest.raises(RuntimeError, match="closed"):
        s.run()


def test_non_contiguous_and_oracle_inputs():
    g = mn.Graph()
    g.output("y", g.input("x", (2, 3)) * 2.0)
    x = np.arange(6, dtype=np.float32).reshape(3, 2).T  # a transposed view
    np.testing.assert_array_equal(mn.compile(g).run({"x": x})["y"], x * 2)
    oracle = mn.compile(g, f64=True)  # f64 storage: float32 in, float64 out
    y = oracle.run({"x": x})["y"]
    assert y.dtype == np.float64 and oracle.buffers()["x"]["stored"] == "f64"
    np.testing.assert_array_equal(y, x.astype(np.float64) * 2)


def test_optimize_off_plans_the_graph_as_built():
    g = mn.Graph()
    x = g.input("x", (8,))
    g.output("y", mn.exp(mn.neg(x)) * 3.0)
    fused, plain = mn.compile(g), mn.compile(g, optimize=False)
    assert len(fused.plan()["dispatches"]) < len(plain.plan()["dispatches"])
    v = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(fused.run({"x": v})["y"], plain.run({"x": v})["y"], rtol=1e-6)


def heavy_session():
    g = mn.Graph()
    a = g.input("a", (512, 512))
    y = a
    for _ in range(40):
        y = mn.tanh(y @ a) * 0.01
    g.output("y", y)
    s = mn.compile(g, threads=1)
    s.set("a", np.full((512, 512), 0.01, np.float32))
    return s


def test_the_gil_is_released_while_a_program_runs():
    s = heavy_session()
    start = time.perf_counter()
    s.run()
    alone = time.perf_counter() - start
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.01)
    begin = time.perf_counter()
    s.run()
    end = time.perf_counter()
    stop.set()
    t.join()
    during = [x for x in ticks if begin < x < end]
    # With the GIL held the counter could not run at all during the step (~%.0f ms alone).
    assert alone > 0.02, f"the step is too short to observe ({alone * 1e3:.1f} ms)"
    assert len(during) >= 0.25 * (end - begin) / 0.0012, (len(during), end - begin)


def test_a_session_refuses_a_second_thread_instead_of_racing():
    s = heavy_session()
    errors = []
    t = threading.Thread(target=s.run)
    t.start()
    time.sleep(0.002)
    while t.is_alive():
        try:
            s.get("y")
        except RuntimeError as e:
            errors.append(str(e))
            break
        time.sleep(0.001)
    t.join()
    assert errors and "in use by another thread" in errors[0]
    s.get("y")  # free again


def test_auto_device_falls_back_or_finds_a_gpu():
    g, *_ = small_graph()
    s = mn.compile(g, "auto")
    assert s.device_note == "" or "using the CPU backend" in s.device_note
    assert s.run({"x": np.ones((4, 3), np.float32)})["y"].shape == (4, 2)
    s.close()
    assert s.closed

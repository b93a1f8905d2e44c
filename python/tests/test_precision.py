"""Precision contracts from Python: `compile(precision=...)` and `Trainer(precision=...)` against
NumPy's own half-precision rounding (np.float16 rounds to nearest even), and weights held in
16 bits (`compile(weights_dtype=...)`)."""
import numpy as np
import pytest

import meganeura as mn


def product_graph():
    g = mn.Graph()
    x = g.input("x", (6, 200))
    w = g.parameter("w", (200, 5), mn.Init.normal(1.0))
    g.output("y", x @ w)
    return g


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_accelerated_matmul_reads_operands_rounded_to_half(device):
    if device == "vulkan":
        from conftest import vulkan_device_or_skip

        vulkan_device_or_skip()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 200)).astype(np.float32)
    w = rng.standard_normal((200, 5)).astype(np.float32)
    h = lambda a: a.astype(np.float16).astype(np.float64)  # noqa: E731
    s = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))  # sum |x||w| per output
    want = h(x) @ h(w)
    sess = mn.compile(product_graph(), device, precision="accelerated", cache_dir="-")
    sess.set("w", w)
    got = sess.run({"x": x})["y"].astype(np.float64)
    # f32 accumulation of 200 products of the rounded operands: within (k + 2) 2^-24 S.
    assert np.all(np.abs(got - want) <= 202 * 2.0**-24 * s)
    strict = mn.compile(product_graph(), device, cache_dir="-")
    strict.set("w", w)
    plain = strict.run({"x": x})["y"].astype(np.float64)
    assert np.all(np.abs(plain - x.astype(np.float64) @ w.astype(np.float64)) <= 202 * 2.0**-24 * s)
    assert np.count_nonzero(got != plain) > got.size // 2


def test_accelerated_training_keeps_gradients_in_f32_and_learns():
    g = mn.Graph()
    x = g.input("x", (32, 8))
    y = g.input("y", (32,), "i32")
    loss = mn.cross_entropy(mn.models.mlp(g, x, inputs=8, hidden=16, classes=3), y)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((32, 8)).astype(np.float32)
    ys = (xs[:, 0] > 0).astype(np.int32) + (xs[:, 1] > 1).astype(np.int32)
    t = mn.Trainer(g, loss, mn.Optimizer(kind="adam", lr=0.01), device="cpu", seed=2, precision="accelerated")
    first = t.step({"x": xs, "y": ys})
    for _ in range(60):
        last = t.step({"x": xs, "y": ys})
    assert last < 0.5 * first


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_reduced_backward_scales_the_loss_and_skips_an_overflowing_update(device):
    """loss = sum(x @ w): the gradient reaching the product is the loss scale itself, and 65536
    overflows f16 (largest finite 65504). The first update is skipped and halves the scale; the
    second applies dW = round(x)^T 1 (NumPy's float16 rounding), not x^T 1."""
    if device == "vulkan":
        from conftest import vulkan_device_or_skip

        vulkan_device_or_skip()
    g = mn.Graph()
    x = g.input("x", (4, 3))
    w = g.parameter("w", (3, 2), mn.Init.normal(1.0))
    loss = mn.sum(x @ w)
    xs = (0.1 + 0.037 * np.arange(12)).reshape(4, 3).astype(np.float32)
    t = mn.Trainer(g, loss, mn.Optimizer(kind="sgd", lr=1.0), device=device, precision="accelerated",
                   backward="reduced", cache_dir="-")
    w0 = t.session.get("w").astype(np.float64)
    assert t.loss_scale == 65536
    t.step({"x": xs})
    assert (t.skipped_updates, t.updates, t.loss_scale) == (1, 0, 32768)
    assert np.array_equal(t.session.get("w"), w0)
    t.step({"x": xs})
    assert (t.skipped_updates, t.updates) == (1, 1)
    rounded = xs.astype(np.float16).astype(np.float64).sum(axis=0)[:, None] * np.ones((1, 2))
    exact = xs.astype(np.float64).sum(axis=0)[:, None] * np.ones((1, 2))
    got = t.session.get("w").astype(np.float64)
    assert np.allclose(got, w0 - rounded, rtol=1e-6, atol=1e-6)
    assert not np.allclose(got, w0 - exact, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="backward 'reduced'"):
        mn.Trainer(g, loss, mn.Optimizer(kind="sgd", lr=1.0), backward="reduced")
    plain = mn.Trainer(g, loss, mn.Optimizer(kind="sgd", lr=1.0))
    assert (plain.loss_scale, plain.skipped_updates) == (0, 0)


def test_unknown_contract_is_refused_by_name():
    with pytest.raises(ValueError, match="'fp8'.*accelerated-bf16"):
        mn.compile(product_graph(), precision="fp8")


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_weights_held_in_f16_are_rounded_once_and_multiplied_in_f32(device):
    if device == "vulkan":
        from conftest import vulkan_device_or_skip

        vulkan_device_or_skip()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 200)).astype(np.float32)
    w = rng.standard_normal((200, 5)).astype(np.float32)
    sess = mn.compile(product_graph(), device, weights_dtype="f16", cache_dir="-")
    sess.set("w", w)
    held = sess.get("w")
    assert np.array_equal(held, w.astype(np.float16).astype(np.float32))  # nearest even, bit for bit
    got = sess.run({"x": x})["y"].astype(np.float64)
    s = np.abs(x.astype(np.float64)) @ np.abs(held.astype(np.float64))
    # The activations stay f32: f32 accumulation of the exact products, within (k + 2) 2^-24 S.
    assert np.all(np.abs(got - x.astype(np.float64) @ held.astype(np.float64)) <= 202 * 2.0**-24 * s)
    with pytest.raises(ValueError, match="weights_dtype 'f8': expected f32, f16 or bf16"):
        mn.compile(product_graph(), weights_dtype="f8")

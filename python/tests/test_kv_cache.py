"""The key/value cache builders (kv_cache_write, cached_attention, rope_at), top_k and matmul_q
against NumPy in double. The C++ tests (core_kv_cache_test, core_quant_matmul_test) cover
decoding through them; here each builder is checked once as bound."""
import math

import numpy as np
import pytest

import meganeura as mn
from test_builders import LOOSE, evaluate, f64, rand


def test_kv_cache_write_puts_rows_at_the_position():
    cache, rows = rand(1, 2, 8, 4), rand(1, 2, 3, 4)
    got = evaluate(lambda g, c, r, p: mn.kv_cache_write(c, r, p), c=cache, r=rows, p=np.array([4], np.int32))
    want = cache.copy()
    want[:, :, 4:7] = rows
    np.testing.assert_array_equal(got, want)  # copies: exact
    with pytest.raises(RuntimeError, match="position 6 with 3 new rows"):
        evaluate(lambda g, c, r, p: mn.kv_cache_write(c, r, p), c=cache, r=rows, p=np.array([6], np.int32))


def test_cached_attention_over_the_prefix_with_a_window():
    q, k, v = rand(1, 4, 2, 4), rand(1, 2, 9, 4), rand(1, 2, 9, 3)
    pos, window = 5, 3
    got = evaluate(lambda g, q, k, v, p: mn.cached_attention(q, k, v, p, window=window), q=q, k=k, v=v,
                   p=np.array([pos], np.int32))
    qd, kd, vd = f64(q, k, v)
    kd, vd = kd.repeat(2, axis=1), vd.repeat(2, axis=1)  # query head h reads kv head h // 2
    scores = qd @ np.swapaxes(kd, -1, -2) / math.sqrt(4)
    qpos, kpos = pos + np.arange(2)[:, None], np.arange(9)[None, :]
    scores = np.where((kpos <= qpos) & (kpos > qpos - window), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ vd, **LOOSE)


def test_rope_at_is_rope_at_absolute_positions():
    x = rand(2, 3, 8)
    got = evaluate(lambda g, x, o: mn.rope_at(x, o, theta=500.0), x=x, o=np.array([4], np.int32))
    padded = np.concatenate([np.zeros((2, 4, 8), np.float32), x], axis=1)  # x at positions 4..6
    want = evaluate(lambda g, x: mn.rope(x, theta=500.0), x=padded)[:, 4:]
    np.testing.assert_allclose(got, want, **LOOSE)


def test_top_k_is_the_largest_entries_largest_first():
    x = rand(3, 500)
    x[1, 7] = x[1, 400] = x[1].max() + 1  # a tie: the lower index first
    x[2, 11] = -0.0
    x[2, 12] = 0.0
    x[2] = np.where(np.arange(500) >= 13, -5.0, x[2])  # -0 and +0 among the top: one value
    g = mn.Graph()
    values, indices = mn.top_k(g.input("x", x.shape), 6)
    g.output("v", values)
    g.output("i", indices)
    got = mn.compile(g, "cpu").run({"x": x})
    want = np.array([sorted(range(500), key=lambda j: (-float(r[j]), j))[:6] for r in x])  # stable: ties by index
    np.testing.assert_array_equal(got["i"], want)
    assert got["i"].dtype == np.int32
    np.testing.assert_array_equal(got["v"], np.take_along_axis(x, want, axis=1))
    with pytest.raises(ValueError, match=r"\[top_k\] k must be in \[1, min\(1024, 500\)\], got 501"):
        mn.top_k(g.input("y", x.shape), 501)


def q_round(w, fmt):
    """The published block formats' round trip, blocks of 32 along each row: Q8_0 an f16 scale
    max|x| / 127 and integers in [-127, 127]; Q4_0 an f16 scale m / -8 (m the entry of largest
    magnitude) and nibbles q = min(15, floor(x / scale + 8.5)), values (q - 8) * scale."""
    x = np.asarray(w, np.float32).reshape(-1, 32).astype(np.float64)
    if fmt == "q8_0":
        scale = np.abs(x).max(axis=1, keepdims=True) / 127
        q = np.clip(np.round(x / scale), -127, 127)
    else:
        m = np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)
        scale = m / -8
        q = np.minimum(15, np.floor(x / scale + 8.5)) - 8
    return (q * scale.astype(np.float16).astype(np.float64)).reshape(np.shape(w))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_matmul_q_multiplies_by_the_rounded_weight(fmt):
    x, w = rand(4, 96), rand(10, 96)
    g = mn.Graph()
    y = mn.matmul_q(g.input("x", x.shape), g.parameter("w", w.shape, mn.Init.normal(0.1), dtype=fmt))
    g.output("y", y)
    s = mn.compile(g, "cpu")
    s["w"] = w
    got = s.run({"x": x})["y"]
    held = s["w"]  # the blocks, decoded: the rounded weight
    np.testing.assert_allclose(held, q_round(w, fmt), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, x.astype(np.float64) @ held.T.astype(np.float64), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"\[matmul_q\] the weight must be of a block type"):
        mn.matmul_q(g.input("x2", x.shape), g.parameter("f", w.shape, mn.Init.normal(0.1)))


def test_quantise_weights_holds_linear_layers_in_blocks():
    """A linear layer (x @ w.T, w [48, 64]) moves into Q8_0 and computes with the rounded weight;
    a weight also read untransposed, one kept by name and one whose rows are no whole blocks
    stay f32."""
    x, w, v, k, u, w2 = rand(5, 64), rand(48, 64), rand(64, 64), rand(16, 64), rand(7, 40), rand(32, 64)
    g = mn.Graph()
    xi = g.input("x", x.shape)
    wp = g.parameter("w", w.shape, mn.Init.normal(0.1))
    g.output("y2", mn.matmul(xi, g.parameter("w2", w2.shape, mn.Init.normal(0.1)), trans_b=True))
    vp = g.parameter("v", v.shape, mn.Init.normal(0.1))
    kp = g.parameter("k", k.shape, mn.Init.normal(0.1))
    up = g.parameter("u", u.shape, mn.Init.normal(0.1))
    g.output("y", mn.matmul(xi, wp, trans_b=True))
    g.output("z", mn.matmul(xi, vp) + mn.matmul(mn.matmul(xi, kp, trans_b=True), kp))
    g.output("t", mn.matmul(g.input("r", (3, 40)), up, trans_b=True))
    q = mn.quantise_weights(g, "q8_0", keep_f32=lambda name: name == "w2")
    assert q is not g and len(q.outputs) == 4
    s = mn.compile(q, "cpu")
    r = rand(3, 40)
    for name, a in (("w", w), ("v", v), ("k", k), ("u", u), ("w2", w2)):
        s[name] = a
    out = s.run({"x": x, "r": r})
    np.testing.assert_allclose(s["w"], q_round(w, "q8_0"), rtol=0, atol=1e-6)
    for name, a in (("v", v), ("k", k), ("u", u), ("w2", w2)):
        np.testing.assert_array_equal(s[name], a.astype(np.float32))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out["y"], x64 @ q_round(w, "q8_0").T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["z"], x64 @ v + (x64 @ k.T) @ k, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"f16 is not a block format"):
        mn.quantise_weights(g, "f16")

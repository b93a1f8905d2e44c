"""The key/value cache builders (kv_cache_write, cached_attention, rope_at) against NumPy in
double. The C++ tests (core_kv_cache_test) cover decoding through them; here each builder is
checked once as bound."""
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

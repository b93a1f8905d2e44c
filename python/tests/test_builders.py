"""Every graph builder of the module, run on the CPU backend and compared with a NumPy reference
computed in float64. Tolerances: f32 arithmetic against f64, relative 1e-5 for elementwise ops
and short sums (a few f32 roundings), 1e-4 where a result sums tens of products or goes through
exp/log (softmax, norms, attention, convolution)."""
import math

import numpy as np
import pytest

import meganeura as mn

RNG = np.random.default_rng(7)
TIGHT = dict(rtol=1e-5, atol=1e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def evaluate(build, **inputs):
    """Builds `build(graph, **input tensors)`, compiles it for the CPU and runs it on `inputs`."""
    g = mn.Graph()
    tensors = {k: g.input(k, v.shape, dtype=v.dtype) for k, v in inputs.items()}
    out = build(g, **tensors)
    g.output("y", out)
    s = mn.compile(g, "cpu")
    return s.run({k: v for k, v in inputs.items() if k in s})["y"]  # an unused input is no buffer


def f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


UNARY = {
    "copy": lambda x: x,
    "detach": lambda x: x,
    "neg": lambda x: -x,
    "exp": np.exp,
    "abs": np.abs,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "positive_mask": lambda x: (x > 0).astype(np.float64),
    "softplus": lambda x: np.logaddexp(0, x),
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
}
POSITIVE = {"log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x)}


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(POSITIVE))
def test_unary(name):
    x = rand(3, 5, low=0.1) if name in POSITIVE else rand(3, 5)
    ref = {**UNARY, **POSITIVE}[name](x.astype(np.float64))
    got = evaluate(lambda g, x: getattr(mn, name)(x), x=x)
    np.testing.assert_allclose(got, ref, **TIGHT)


ERF = np.vectorize(math.erf)


def test_gelu_and_its_gradient():
    x = rand(4, 6)
    xd = x.astype(np.float64)
    exact = 0.5 * xd * (1 + ERF(xd / math.sqrt(2)))
    tanh = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
    np.testing.assert_allclose(evaluate(lambda g, x: mn.gelu(x), x=x), exact, **TIGHT)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.gelu(x, tanh_approximation=True), x=x), tanh, **TIGHT)
    # d gelu / dx = Phi(x) + x phi(x)
    d_exact = 0.5 * (1 + ERF(xd / math.sqrt(2))) + xd * np.exp(-xd * xd / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.gelu_grad(x), x=x), d_exact, **LOOSE)
    h = 1e-6  # the tanh form's derivative, by central differences in float64
    t = lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))  # noqa: E731
    np.testing.assert_allclose(evaluate(lambda g, x: mn.gelu_grad(x, True), x=x), (t(xd + h) - t(xd - h)) / (2 * h),
                               **LOOSE)


def test_affine_cast_and_clip_coef():
    x = rand(2, 3)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.affine(x, 3.0, 0.5), x=x), 3.0 * x.astype(np.float64) + 0.5,
                               **TIGHT)
    got = evaluate(lambda g, x: mn.cast(x, "i32"), x=x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.trunc(x).astype(np.int32))
    ids = np.array([1, -2, 7], dtype=np.int32)
    np.testing.assert_array_equal(evaluate(lambda g, i: mn.cast(i, np.float32), i=ids), ids.astype(np.float32))
    norm = np.array(4.0, dtype=np.float32)
    np.testing.assert_allclose(evaluate(lambda g, n: mn.clip_coef(n, 2.0), n=norm), 2.0 / (4.0 + 1e-6), **TIGHT)
    np.testing.assert_allclose(evaluate(lambda g, n: mn.clip_coef(n, 10.0), n=norm), 1.0, **TIGHT)


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "less": lambda a, b: (a < b).astype(np.float64),
    "equal": lambda a, b: (a == b).astype(np.float64),
    "swiglu": lambda a, b: a / (1 + np.exp(-a)) * b,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcasting(name):
    a, b = rand(3, 4), rand(1, 4, low=0.5)
    if name == "equal":
        b = a[:1].copy()
        b[0, 1] += 1
    got = evaluate(lambda g, a, b: getattr(mn, name)(a, b), a=a, b=b)
    np.testing.assert_allclose(got, BINARY[name](*f64(a, b)), **TIGHT)


def test_where_and_mse():
    c = (rand(3, 4) > 0).astype(np.float32)
    a, b = rand(3, 4), rand(3, 4)
    np.testing.assert_array_equal(evaluate(lambda g, c, a, b: mn.where(c, a, b), c=c, a=a, b=b), np.where(c != 0, a, b))
    np.testing.assert_allclose(evaluate(lambda g, a, b: mn.mse(a, b), a=a, b=b), np.mean((a.astype(np.float64) - b) ** 2),
                               **TIGHT)


def test_tensor_operators_with_tensors_and_scalars():
    a, b = rand(2, 3), rand(2, 3, low=0.5)
    ad, bd = f64(a, b)
    cases = {
        "a+b": (lambda a, b: a + b, ad + bd),
        "a-b": (lambda a, b: a - b, ad - bd),
        "a*b": (lambda a, b: a * b, ad * bd),
        "a/b": (lambda a, b: a / b, ad / bd),
        "-a": (lambda a, b: -a, -ad),
        "a+2": (lambda a, b: a + 2.0, ad + 2),
        "2+a": (lambda a, b: 2.0 + a, ad + 2),
        "a-2": (lambda a, b: a - 2, ad - 2),
        "2-a": (lambda a, b: 2 - a, 2 - ad),
        "a*3": (lambda a, b: a * 3.0, ad * 3),
        "3*a": (lambda a, b: 3.0 * a, ad * 3),
        "a/4": (lambda a, b: a / 4.0, ad / 4),
        "1/b": (lambda a, b: 1.0 / b, 1 / bd),
    }
    for label, (op, ref) in cases.items():
        got = evaluate(lambda g, a, b: op(a, b), a=a, b=b)
        np.testing.assert_allclose(got, ref, **TIGHT, err_msg=label)
    m = rand(3, 2)
    np.testing.assert_allclose(evaluate(lambda g, a, m: a @ m, a=a, m=m), ad @ m.astype(np.float64), **LOOSE)


def test_reductions_and_softmax():
    x = rand(2, 3, 4)
    xd = x.astype(np.float64)
    for name, ref in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
        f = getattr(mn, name)
        np.testing.assert_allclose(evaluate(lambda g, x: f(x), x=x), ref(xd), **LOOSE)
        np.testing.assert_allclose(evaluate(lambda g, x: f(x, axes=(0, 2)), x=x), ref(xd, axis=(0, 2)), **LOOSE)
        np.testing.assert_allclose(evaluate(lambda g, x: f(x, axes=[1], keepdims=True), x=x),
                                   ref(xd, axis=1, keepdims=True), **LOOSE)
    e = np.exp(xd - xd.max(axis=1, keepdims=True))
    np.testing.assert_allclose(evaluate(lambda g, x: mn.softmax(x, axis=1), x=x), e / e.sum(1, keepdims=True), **LOOSE)
    e = np.exp(xd - xd.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(evaluate(lambda g, x: mn.log_softmax(x), x=x), np.log(e / e.sum(-1, keepdims=True)),
                               **LOOSE)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.sum_to(x, (1, 3, 1)), x=x), xd.sum(axis=(0, 2), keepdims=True),
                               **LOOSE)


def test_matmul_with_transposes():
    a, b = rand(2, 5, 3), rand(4, 5)
    ad, bd = f64(a, b)
    got = evaluate(lambda g, a, b: mn.matmul(a, b, trans_a=True, trans_b=True), a=a, b=b)
    np.testing.assert_allclose(got, np.swapaxes(ad, -1, -2) @ bd.T, **LOOSE)


def conv2d_ref(x, w, stride, pad, dilation=(1, 1), groups=1):
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        grp = oc // og
        for i in range(kh):
            for j in range(kw):
                patch = x[:, grp * cg:(grp + 1) * cg, i * dilation[0]:i * dilation[0] + stride[0] * oh:stride[0],
                          j * dilation[1]:j * dilation[1] + stride[1] * ow:stride[1]]
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, i, j])
    return out


def test_convolutions_and_pooling():
    x, w = rand(2, 4, 7, 6), rand(6, 2, 3, 3)
    xd, wd = f64(x, w)
    got = evaluate(lambda g, x, w: mn.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2), groups=2), x=x, w=w)
    np.testing.assert_allclose(got, conv2d_ref(xd, wd, (2, 1), (1, 1), (1, 2), 2), **LOOSE)
    x1, w1 = rand(2, 3, 9), rand(5, 3, 3)
    got = evaluate(lambda g, x, w: mn.conv1d(x, w, stride=2, padding=1), x=x1, w=w1)
    ref = conv2d_ref(x1.astype(np.float64)[:, :, None], w1.astype(np.float64)[:, :, None], (1, 2), (0, 1))[:, :, 0]
    np.testing.assert_allclose(got, ref, **LOOSE)
    p = rand(1, 2, 4, 4)
    pd = p.astype(np.float64)
    blocks = pd.reshape(1, 2, 2, 2, 2, 2)
    np.testing.assert_allclose(evaluate(lambda g, p: mn.max_pool2d(p, 2, 2), p=p), blocks.max(axis=(3, 5)), **TIGHT)
    np.testing.assert_allclose(evaluate(lambda g, p: mn.avg_pool2d(p, 2, 2), p=p), blocks.mean(axis=(3, 5)), **TIGHT)
    np.testing.assert_allclose(evaluate(lambda g, p: mn.global_avg_pool2d(p), p=p), pd.mean(axis=(2, 3)), **TIGHT)
    np.testing.assert_array_equal(evaluate(lambda g, p: mn.upsample_nearest2x(p), p=p),
                                  p.repeat(2, axis=2).repeat(2, axis=3))


def test_movement():
    x = rand(2, 3, 4)
    checks = [
        (lambda g, x: mn.reshape(x, (4, -1)), x.reshape(4, -1)),
        (lambda g, x: mn.permute(x, (2, 0, 1)), x.transpose(2, 0, 1)),
        (lambda g, x: mn.transpose(x), np.swapaxes(x, -1, -2)),
        (lambda g, x: mn.transpose(x, 0, 2), np.swapaxes(x, 0, 2)),
        (lambda g, x: mn.slice(x, (0, 1, 1), (2, 3, 3)), x[:, 1:3, 1:3]),
        (lambda g, x: mn.slice_axis(x, 2, 1, 4), x[:, :, 1:4]),
        (lambda g, x: mn.pad(x, (0, 1, 0), (1, 0, 2)), np.pad(x, ((0, 1), (1, 0), (0, 2)))),
        (lambda g, x: mn.concat([x, x * 2.0], 1), np.concatenate([x, x * 2], 1)),
        (lambda g, x: mn.broadcast_to(mn.reshape(mn.slice_axis(x, 0, 0, 1), (3, 4)), (5, 3, 4)),
         np.broadcast_to(x[0], (5, 3, 4))),
    ]
    for build, ref in checks:
        np.testing.assert_array_equal(evaluate(build, x=x), ref)


def test_indexing_and_losses():
    table = rand(6, 3)
    ids = np.array([[0, 5], [2, 2]], dtype=np.int32)
    np.testing.assert_array_equal(evaluate(lambda g, t, i: mn.embedding(t, i), t=table, i=ids), table[ids])
    labels = np.array([1, -100, 3], dtype=np.int32)
    np.testing.assert_array_equal(evaluate(lambda g, i: mn.one_hot(i, 4), i=labels),
                                  np.array([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]], dtype=np.float32))
    idx = np.array([2, 0], dtype=np.int32)
    np.testing.assert_array_equal(evaluate(lambda g, t, i: mn.gather(t, 1, i), t=table, i=idx), table[:, idx])
    logits = rand(3, 4)
    ld = logits.astype(np.float64)
    logp = ld - ld.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    ref = -np.mean([logp[0, 1], logp[2, 3]])  # the ignored row does not count
    for f in (mn.cross_entropy, mn.softmax_cross_entropy):
        np.testing.assert_allclose(evaluate(lambda g, l, t: f(l, t), l=logits, t=labels), ref, **LOOSE)
    np.testing.assert_allclose(evaluate(lambda g, l, t: f(l, t, ignore_index=1), l=logits, t=np.array([1, 2, 3], np.int32)),
                               -np.mean([logp[1, 2], logp[2, 3]]), **LOOSE)
    g = mn.Graph()
    g.output("y", mn.arange(g, 5, start=1.0, step=0.5))
    np.testing.assert_array_equal(mn.compile(g).run()["y"], np.arange(5) * 0.5 + 1)


def test_sequence_ops():
    x = rand(2, 5, 8)
    xd = x.astype(np.float64)
    inv = 1.0 / (500.0 ** (np.arange(0, 8, 2) / 8))
    ang = np.arange(5)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    half = np.concatenate([-xd[..., 4:], xd[..., :4]], -1)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.rope(x, theta=500.0), x=x), xd * cos + half * sin, **LOOSE)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.rope(x, theta=500.0, inverse=True), x=x), xd * cos - half * sin,
                               **LOOSE)
    s = rand(3, 5)
    mask = np.triu(np.ones((3, 5), bool), k=5 - 3 + 1)  # aligned to the bottom right
    np.testing.assert_array_equal(evaluate(lambda g, s: mn.causal_mask(s, fill=-7.0), s=s), np.where(mask, -7.0, s))
    q, k, v = rand(1, 4, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 6)
    qd, kd, vd = f64(q, k, v)
    kd, vd = kd.repeat(2, axis=1), vd.repeat(2, axis=1)  # grouped heads: each kv head serves two
    scores = qd @ np.swapaxes(kd, -1, -2) / math.sqrt(8)
    scores = np.where(np.triu(np.ones((3, 5), bool), k=3), -np.inf, scores)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ vd
    np.testing.assert_allclose(evaluate(lambda g, q, k, v: mn.attention(q, k, v, causal=True), q=q, k=k, v=v), ref,
                               **LOOSE)
    got = evaluate(lambda g, q, k, v: mn.attention(q, k, v, scale=0.1), q=q, k=k, v=v)
    p = np.exp(qd @ np.swapaxes(kd, -1, -2) * 0.1)
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ vd, **LOOSE)
    t = np.array([0.0, 3.0, 250.0], dtype=np.float32)
    f = np.exp(-math.log(10000.0) * np.arange(4) / 4)
    np.testing.assert_allclose(evaluate(lambda g, t: mn.timestep_embedding(t, 8), t=t),
                               np.concatenate([np.cos(t[:, None] * f), np.sin(t[:, None] * f)], 1), **LOOSE)


def norm_ref(x, axes, eps):
    mu = x.mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)


def test_norms():
    x, gamma, beta = rand(2, 3, 8), rand(8), rand(8)
    xd, gd, bd = f64(x, gamma, beta)
    np.testing.assert_allclose(evaluate(lambda g, x, a, b: mn.layer_norm(x, a, b), x=x, a=gamma, b=beta),
                               norm_ref(xd, -1, 1e-5) * gd + bd, **LOOSE)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.layer_norm(x, eps=0.1), x=x), norm_ref(xd, -1, 0.1), **LOOSE)
    rms = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(evaluate(lambda g, x, a: mn.rms_norm(x, a), x=x, a=gamma), rms * gd, **LOOSE)
    np.testing.assert_allclose(evaluate(lambda g, x: mn.rms_norm(x), x=x), rms, **LOOSE)
    img, cg, cb = rand(2, 4, 3, 3), rand(4), rand(4)
    imd = img.astype(np.float64)
    grouped = norm_ref(imd.reshape(2, 2, 18), -1, 1e-5).reshape(2, 4, 3, 3)
    np.testing.assert_allclose(evaluate(lambda g, x, a, b: mn.group_norm(x, 2, a, b), x=img, a=cg, b=cb),
                               grouped * cg[:, None, None] + cb[:, None, None], **LOOSE)
    mean, var = rand(4), rand(4, low=0.5)
    ref = (imd - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * cg[:, None, None] + cb[:, None, None]
    got = evaluate(lambda g, x, a, b, m, v: mn.batch_norm_inference(x, a, b, m, v), x=img, a=cg, b=cb, m=mean, v=var)
    np.testing.assert_allclose(got, ref, **LOOSE)


def test_batch_norm_train_updates_the_running_statistics():
    x, gamma, beta = rand(3, 2, 2, 2), rand(2), rand(2)
    g = mn.Graph()
    xs, gs, bs = g.input("x", x.shape), g.input("gamma", (2,)), g.input("beta", (2,))
    rm, rv = g.state("rm", (2,), mn.Init.zeros()), g.state("rv", (2,), mn.Init.ones())
    g.output("y", mn.batch_norm_train(xs, gs, bs, rm, rv, momentum=0.25))
    s = mn.compile(g)
    y = s.run({"x": x, "gamma": gamma, "beta": beta})["y"]
    xd = x.astype(np.float64)
    ref = norm_ref(xd, (0, 2, 3), 1e-5) * gamma[:, None, None] + beta[:, None, None]
    np.testing.assert_allclose(y, ref, **LOOSE)
    np.testing.assert_allclose(s.get("rm"), 0.25 * xd.mean(axis=(0, 2, 3)), **LOOSE)
    np.testing.assert_allclose(s.get("rv"), 0.75 + 0.25 * xd.var(axis=(0, 2, 3), ddof=1), **LOOSE)


def test_grad_and_vjp():
    g = mn.Graph()
    w = g.parameter("w", (3,), mn.Init.normal(1.0))
    x = g.input("x", (3,))
    y = w * x * w  # dy/dw = 2 w x
    gw, gx = mn.grad(mn.sum(y), [w, x])
    seed = g.input("seed", (3,))
    (vw,) = mn.vjp(y, seed, [w])
    for name, t in (("gw", gw), ("gx", gx), ("vw", vw)):
        g.output(name, t)
    s = mn.compile(g, seed=3)
    xv, sv = rand(3), rand(3)
    out = s.run({"x": xv, "seed": sv})
    wv = s.get("w").astype(np.float64)
    np.testing.assert_allclose(out["gw"], 2 * wv * xv, **TIGHT)
    np.testing.assert_allclose(out["gx"], wv * wv, **TIGHT)
    np.testing.assert_allclose(out["vw"], 2 * wv * xv * sv, **TIGHT)

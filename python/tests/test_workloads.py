"""The five matched workloads from Python: each ci-scale run (outputs, loss and every gradient)
equals `meganeura run --dump` bit for bit, and Hugging Face-named weights load by name."""
import os

import numpy as np
import pytest

import meganeura as mn

IDS = ["smollm2", "smolvla", "unet", "resnet50", "whisper"]


def build_like_the_cli(wid):
    """The graph `meganeura run` builds: forward outputs, "loss" and "grad.<parameter>"."""
    g = mn.Graph()
    w = mn.workloads.build(g, wid, scale="ci")
    for name, t in w.outputs.items():
        g.output(name, t)
    g.output("loss", w.loss)
    params = g.parameters()
    for p, dp in zip(params, mn.grad(w.loss, params)):
        g.output("grad." + p.name, dp)
    return g, w, params


def assert_bit_equal(ours, dump):
    assert set(ours) == set(dump)
    for name, ref in dump.items():
        got = ours[name]
        assert got.dtype == np.float32 and got.shape == ref.shape, name
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), f"{name} differs"


@pytest.mark.parametrize("wid", IDS)
def test_ci_run_equals_the_cli_dump_bit_for_bit(wid, tmp_path, cli):
    dump = tmp_path / "cli.safetensors"
    cli("run", "--workload", wid, "--scale", "ci", "--device", "cpu", "--seed", 1, "--dump", dump)
    g, w, params = build_like_the_cli(wid)
    # The CLI's thread count (all cores): the CPU pool is per process, so an earlier session's
    # `threads` would otherwise still apply, and the per-thread parts of a sum set its rounding.
    session = mn.compile(g, "cpu", seed=1, threads=os.cpu_count())
    for p in params:
        v = mn.workloads.special_init(wid, p)
        if v is not None:
            session.set(p.name, v)
    out = session.run(w.synthetic_inputs(seed=1))
    assert_bit_equal(out, mn.load_safetensors(dump))


def test_hugging_face_named_weights_load_by_name(tmp_path, cli):
    weights, inputs, dump = (tmp_path / f for f in ("w.safetensors", "i.safetensors", "d.safetensors"))
    cli("run", "--workload", "smollm2", "--scale", "ci", "--device", "cpu", "--seed", 9, "--write-weights", weights,
        "--write-inputs", inputs, "--dump", dump)
    names = mn.safetensors_header(weights)["tensors"]
    assert "model.embed_tokens.weight" in names and "model.layers.0.self_attn.q_proj.weight" in names
    g, w, params = build_like_the_cli("smollm2")
    session = mn.compile(g, "cpu", seed=123, threads=os.cpu_count())  # random weights, all replaced by the file's
    assert session.load_weights(g, weights) == len(params)
    out = session.run(mn.load_safetensors(inputs))
    assert_bit_equal(out, mn.load_safetensors(dump))


def test_workload_listing_and_specs():
    listed = mn.workloads.list()
    assert [w["id"] for w in listed] == IDS
    assert all(w["description"] and w["published_parameters"] > 0 for w in listed)
    g = mn.Graph()
    w = mn.workloads.build(g, "smollm2", "full", minimal=True)
    assert repr(w) == "Workload('smollm2')" and w.id == "smollm2" and w.graph is g
    assert w.inputs[0]["dtype"] == "i32" and w.inputs[0]["shape"] == (1, 1)  # one token
    assert mn.workloads.parameter_count(g) == 134515008  # SmolLM2-135M, embeddings tied
    assert w.loss.shape == () and "logits" in w.outputs
    assert mn.workloads.special_init("smollm2", g.parameters()[0]) is None
    wg = mn.Graph()
    mn.workloads.build(wg, "whisper", "ci")
    pos = wg.find("encoder.embed_positions.weight")
    table = mn.workloads.special_init("whisper", pos)
    assert table.dtype == np.float32 and table.shape == pos.shape
    length, channels = pos.shape  # Whisper's sinusoids: [sin(p f_i), cos(p f_i)], f_i = 10000^(-i / (half - 1))
    half = channels // 2
    angle = np.arange(length)[:, None] * np.exp(-np.log(10000.0) / (half - 1) * np.arange(half))[None, :]
    np.testing.assert_allclose(table, np.concatenate([np.sin(angle), np.cos(angle)], 1), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="unknown"):
        mn.workloads.build(mn.Graph(), "gpt5")
    with pytest.raises(ValueError, match="scale"):
        mn.workloads.build(mn.Graph(), "unet", "huge")


def test_chargpt_builds_and_runs():
    text = mn.models.builtin_text()
    vocab = sorted(set(text))
    g = mn.Graph()
    ids = g.input("ids", (2, 8), dtype="i32")
    logits = mn.models.chargpt(g, ids, vocab=len(vocab), dim=32, heads=2, kv_heads=1, layers=1, ffn=64, seq=8)
    assert logits.shape == (2, 8, len(vocab))
    g.output("logits", logits)
    codes = np.array([[vocab.index(c) for c in text[i:i + 8]] for i in (0, 8)], np.int32)
    assert np.isfinite(mn.compile(g).run({"ids": codes})["logits"]).all()

"""Checkpoints and safetensors files across the boundary: a checkpoint written from Python loads
in the CLI and one written by the CLI loads in Python, with the same results on both sides."""
import json

import numpy as np
import pytest

import meganeura as mn

from test_train import batches, mlp_loss_graph, mlp_optimizer


def mlp_test_accuracy(session):
    """The CLI's mlp evaluation (test split, 2048 examples) from Python: accuracy and mean loss."""
    tx, ty = mn.models.synthetic_classification(2048, 1)
    e = mn.Graph()
    e.output("test_logits", mn.models.mlp(e, e.input("test_x", (2048, 16))))
    program = session.add(e)
    logits = session.run({"test_x": tx}, program=program)["test_logits"].astype(np.float64)
    m = logits.max(1, keepdims=True)
    loss = (m[:, 0] + np.log(np.exp(logits - m).sum(1)) - logits[np.arange(2048), ty]).mean()
    return (logits.argmax(1) == ty).mean(), loss


def test_python_checkpoint_loads_in_the_cli(tmp_path, cli):
    x, y = mn.models.synthetic_classification(4096, 0)
    g, loss = mlp_loss_graph()
    trainer = mn.Trainer(g, loss, mlp_optimizer(400), device="cpu", seed=2)
    trainer.train(400, feed=batches(x, y, seed=2))
    path = tmp_path / "from_python.safetensors"
    # The CLI checks the model's hash (its loss graph with the "loss" output): Python built the
    # very model `meganeura infer --model mlp` builds.
    h, h_loss = mlp_loss_graph()
    h.output("loss", h_loss)
    trainer.session.save_checkpoint(path, {"graph_hash": str(h.hash()), "model": "mlp"})
    header = mn.safetensors_header(path)
    assert header["metadata"]["format"] == "meganeura-checkpoint" and header["metadata"]["step"] == "400"
    assert header["tensors"]["mlp.0.weight"] == {"dtype": "f32", "shape": (16, 128)}
    accuracy, test_loss = mlp_test_accuracy(trainer.session)
    out = json.loads(cli("infer", "--model", "mlp", "--checkpoint", path, "--device", "cpu", "--json").stdout)
    assert out["trained_steps"] == 400
    assert out["test_accuracy"] == accuracy and accuracy >= 0.97
    assert out["test_loss"] == pytest.approx(test_loss, rel=1e-9)


def test_cli_checkpoint_loads_in_python(tmp_path, cli):
    path = tmp_path / "from_cli.safetensors"
    out = json.loads(cli("train", "--model", "mlp", "--steps", "300", "--device", "cpu", "--out", path,
                         "--json").stdout)
    # Inference: parameters only, the optimizer state in the file skipped.
    session = mn.Session("cpu")
    e = mn.Graph()
    e.output("test_logits", mn.models.mlp(e, e.input("test_x", (2048, 16))))
    session.add(e)
    meta = session.load_checkpoint(path, parameters_only=True)
    assert meta["step"] == "300" and meta["model"] == "mlp"
    accuracy, test_loss = mlp_test_accuracy(session)
    assert accuracy == out["test_accuracy"]
    assert test_loss == pytest.approx(out["test_loss"], rel=1e-9)
    # Training: the whole state (moments, step counter) resumes.
    g, loss = mlp_loss_graph()
    trainer = mn.Trainer(g, loss, mlp_optimizer(600), device="cpu")
    trainer.session.load_checkpoint(path)
    assert trainer.updates == 300
    np.testing.assert_array_equal(trainer.session.get("mlp.0.weight"), mn.load_safetensors(path)["mlp.0.weight"])


def test_weights_and_safetensors_round_trips(tmp_path):
    g, loss = mlp_loss_graph()
    g.output("loss", loss)
    a = mn.compile(g, seed=4)
    a.save_weights(g, tmp_path / "w.safetensors")
    b = mn.compile(g, seed=5)
    assert not np.array_equal(a.get("mlp.0.weight"), b.get("mlp.0.weight"))
    assert b.load_weights(g, tmp_path / "w.safetensors") == 6
    for name in ("mlp.0.weight", "mlp.2.bias"):
        np.testing.assert_array_equal(a.get(name), b.get(name))
    tensors = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "f64": np.linspace(0, 1, 4),
        "f16": np.array([0.5, -2.0], np.float16),
        "i32": np.array([-1, 7], np.int32),
        "u32": np.array([3], np.uint32),
        "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    }
    path = tmp_path / "t.safetensors"
    mn.save_safetensors(path, tensors, {"note": "from python"})
    back = mn.load_safetensors(path)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v), k
    assert mn.safetensors_header(path)["metadata"] == {"note": "from python"}
    assert set(mn.read_weights(path, ["f32", "i32"])) == {"f32", "i32"}
    # A sharded set described by an index, as Hugging Face publishes large models.
    mn.save_safetensors(tmp_path / "shard1.safetensors", {"a": tensors["f32"]})
    mn.save_safetensors(tmp_path / "shard2.safetensors", {"b": tensors["f64"]})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "shard1.safetensors", "b": "shard2.safetensors"}}))
    both = mn.read_weights(tmp_path / "model.safetensors.index.json")
    assert np.array_equal(both["a"], tensors["f32"]) and np.array_equal(both["b"], tensors["f64"])
    assert set(mn.read_weights(tmp_path)) == {"a", "b"}  # the directory: its index


def test_bf16_weights_widen_to_float32(tmp_path):
    # A bf16 file as other programs write it: the top 16 bits of each float32.
    values = np.array([1.0, -0.5, 3.140625], np.float32)
    raw = (values.view(np.uint32) >> 16).astype(np.uint16)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + raw.tobytes())
    w = mn.load_safetensors(path)["w"]
    assert w.dtype == np.float32 and np.array_equal(w, values)

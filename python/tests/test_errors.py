"""Bad input raises the right Python exception, naming what was wrong; C++ errors keep their
message word for word (the CLI prints the same text)."""
import os

import numpy as np
import pytest

import meganeura as mn


@pytest.fixture
def session():
    g = mn.Graph()
    x = g.input("x", (2, 3))
    ids = g.input("ids", (2,), dtype="i32")
    g.output("y", x * 2.0)
    g.output("z", mn.cast(ids, "f32"))
    return mn.compile(g)


@pytest.mark.parametrize("value, kind, words", [
    (np.ones((2, 3)), TypeError, ["'x'", "f32", "float64", "astype(numpy.float32)"]),
    (np.ones((2, 3), np.int32), TypeError, ["'x'", "int32"]),
    ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], TypeError, ["'x'", "float64"]),
    (np.ones((3, 2), np.float32), ValueError, ["'x'", "(2,3)", "(3,2)"]),
    (np.ones((6,), np.float32), ValueError, ["'x'", "(2,3)", "(6)"]),
])
def test_bad_input_arrays_name_the_input(session, value, kind, words):
    with pytest.raises(kind) as e:
        session.run({"x": value, "ids": np.zeros(2, np.int32)})
    for w in words:
        assert w in str(e.value)


def test_integer_inputs_take_int32_only(session):
    with pytest.raises(TypeError, match=r"'ids' is i32: pass a int32 array, got int64"):
        session.set("ids", np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="'ids'"):
        session.set("ids", np.zeros(2, np.float32))
    session.set("ids", np.array([3, -4], np.int32))
    np.testing.assert_array_equal(session.run()["z"], [3, -4])


def test_unknown_names_and_programs(session):
    with pytest.raises(KeyError, match=r"no tensor named 'nope' \(inputs: ids, x\)"):
        session.run({"nope": np.zeros(1, np.float32)})
    with pytest.raises(KeyError, match="'nope'"):
        session.get("nope")
    with pytest.raises(IndexError, match="no program 3"):
        session.run(program=3)
    with pytest.raises(TypeError, match="inputs must be a dict"):
        session.run([np.zeros(1)])


def test_bad_device_names_the_device():
    g = mn.Graph()
    g.output("y", g.input("x", (1,)) + 1.0)
    with pytest.raises(ValueError, match=r"\[session\] unknown device 'tpu' \(expected cpu, vulkan or auto\)"):
        mn.compile(g, "tpu")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        mn.Session("gpu")
    with pytest.raises(ValueError, match="vulkan_device needs device 'vulkan'"):
        mn.Session("cpu", vulkan_device="0")
    with pytest.raises(TypeError):
        mn.Session(3)
    with pytest.raises(ValueError, match="the f64 oracle runs on the reference CPU backend only"):
        mn.Session("vulkan", f64=True)


def test_builder_errors_keep_the_cpp_message():
    g = mn.Graph()
    a, b = g.input("a", (2, 3)), g.input("b", (4, 5))
    with pytest.raises(ValueError) as e:
        mn.matmul(a, b)
    assert str(e.value) == "[matmul] inner dimensions differ: (2,3) x (4,5)"
    with pytest.raises(ValueError, match=r"^\[graph\] duplicate name 'a'$"):
        g.input("a", (1,))
    other = mn.Graph().input("c", (2, 3))
    with pytest.raises(ValueError, match="different graphs|another graph"):
        mn.add(a, other)
    with pytest.raises(TypeError, match="unsupported dtype 'f8'"):
        g.input("d", (2,), dtype="f8")
    with pytest.raises(TypeError, match="shape must be a tuple of ints"):
        g.input("e", "ab")
    with pytest.raises(ValueError, match="loss must be a scalar"):
        mn.Trainer(g, g.parameter("w", (2,), mn.Init.zeros()) * 1.0)


def test_missing_files_raise_file_not_found_naming_the_path(session, tmp_path):
    missing = tmp_path / "missing.safetensors"
    calls = [
        lambda: session.load_checkpoint(missing),
        lambda: session.load_weights(mn.Graph(), missing),
        lambda: mn.load_safetensors(missing),
        lambda: mn.safetensors_header(str(missing)),
        lambda: mn.read_weights(missing),
        lambda: mn.energy.fit(str(missing)),
        lambda: session.save_checkpoint(tmp_path / "no" / "dir" / "c.safetensors"),
        lambda: mn.save_safetensors(tmp_path / "no" / "t.safetensors", {}),
    ]
    for call in calls:
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert e.value.filename and os.path.basename(e.value.filename) in str(e.value)


def test_malformed_files_raise_file_error_with_the_cli_message(session, tmp_path, cli):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage!garbage")
    with pytest.raises(mn.FileError) as e:
        session.load_checkpoint(bad)
    assert isinstance(e.value, OSError) and isinstance(e.value, ValueError)
    r = cli("infer", "--model", "mlp", "--checkpoint", bad, check=False)
    assert r.returncode != 0 and r.stderr.strip() == f"meganeura: {e.value}"
    for call in (lambda: mn.load_safetensors(bad), lambda: mn.read_weights(bad)):
        with pytest.raises(mn.FileError, match="bad.safetensors"):
            call()


def test_checkpoint_of_another_model_names_the_tensor(session, tmp_path):
    g = mn.Graph()
    g.output("y", g.parameter("w", (3,), mn.Init.ones()) * 2.0)
    other = mn.compile(g)
    path = tmp_path / "w.safetensors"
    other.save_checkpoint(path)
    g2 = mn.Graph()
    g2.output("y", g2.parameter("w", (4,), mn.Init.ones()) * 2.0)
    with pytest.raises(mn.FileError, match="'w'"):
        mn.compile(g2).load_checkpoint(path)


def test_save_safetensors_rejects_unsupported_dtypes(tmp_path):
    with pytest.raises(TypeError, match="tensor 'a' is complex128"):
        mn.save_safetensors(tmp_path / "t.safetensors", {"a": np.zeros(2, np.complex128)})

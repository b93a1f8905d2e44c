"""The examples in examples/python run and reach what they claim (small sizes)."""
import json
import os
import subprocess
import sys

from conftest import BUILD, ROOT


def run_example(name, *args, cwd):
    env = {"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"}
    # A sanitized run preloads the sanitizer runtime that the instrumented module needs.
    env.update({k: v for k, v in os.environ.items()
                if k in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "ASAN_SYMBOLIZER_PATH", "PYTHONMALLOC")})
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / name), *args], capture_output=True,
                       text=True, env=env, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_train_mlp_example(tmp_path, cli):
    out = run_example("train_mlp.py", "--steps", "300", "--out", "mlp.safetensors", cwd=tmp_path)
    accuracy = float(out.split("test accuracy ")[1].split()[0])
    assert accuracy >= 0.97, out
    infer = json.loads(cli("infer", "--model", "mlp", "--checkpoint", tmp_path / "mlp.safetensors", "--device", "cpu",
                           "--json").stdout)
    assert abs(infer["test_accuracy"] - accuracy) <= 5e-5  # the example prints four decimals


def test_smollm2_example_agrees_with_pytorch(tmp_path):
    out = run_example("smollm2_vs_torch.py", "--scale", "ci", cwd=tmp_path)
    rel = float(out.split("relative L2 difference ")[1].split(",")[0])
    assert rel < 1e-4 and "same next token at 100.0% of positions" in out, out

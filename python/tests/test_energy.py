"""meganeura.energy.predict/fit: the same options as `meganeura energy predict|fit`, the same
report as the CLI's --json, as a dict."""
import json
import math
import pathlib

import numpy as np
import pytest

import meganeura as mn

from conftest import ROOT

HARDWARE = str(ROOT / "data" / "hardware.toml")


@pytest.mark.parametrize("flags", [
    dict(layers=12, hidden=768, batch=32, seq=128, tokens=1e9),  # reference model
    dict(layers=12, hidden=768, batch=32, seq=128, tokens=1e9, gpu="v100", efficiency=0.9),  # both
    dict(family="gpt", method="physical", layers=24, hidden=1024, batch=8, seq=1024, tokens=2e9, gpu="a100-80gb",
         gpus=4, strategy="fsdp", dtype="bf16", grad_accum=2, grid=250, heads=16, ff=4096, vocab=50257),
    dict(layers=12, hidden=768, batch=32, seq=128, tokens=3.84e7, dtype="fp16", gpu="a40", power_limit=220),
    dict(layers=12, hidden=768, batch=32, seq=128, tokens=1e9, gpu="rtx-2080-ti", gpus=2, strategy="tp",
         tp_scheme="ffn"),
])
def test_predict_equals_the_cli(flags, cli):
    args = []
    for k, v in flags.items():
        args += ["--" + k.replace("_", "-"), v]
    expected = json.loads(cli("energy", "predict", *args, "--hardware", HARDWARE, "--json").stdout)
    got = mn.energy.predict(**flags, hardware=HARDWARE)
    assert got == expected


def test_predict_options_are_checked():
    with pytest.raises(ValueError, match="needs layers, hidden, batch, seq and tokens"):
        mn.energy.predict(layers=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'layer'"):
        mn.energy.predict(layer=2)
    with pytest.raises(TypeError, match="layers: unexpected value 'two'"):
        mn.energy.predict(layers="two")
    with pytest.raises(ValueError, match=r"\[energy\]"):
        mn.energy.predict(layers=2, hidden=64, batch=1, seq=8, tokens=1e6, method="guess")
    # Pricing a compiled program needs the CLI's built-in models: the library says so.
    with pytest.raises(ValueError, match="no compiled programs to price"):
        mn.energy.predict(model="mlp", gpu="v100")


def study_csv(path):
    """Runs in the reference study's format: BERT shapes on two GPUs, energies with 5% noise."""
    rng = np.random.default_rng(5)
    rows = ["GPU model,arch,strategy,gpus,num_layers,hidden_size,heads,ff,batch_size,seq_len_batch,max_length,"
            "grad_accum,fp16,tokens_seen,duration_s,energy_consumed_kWh"]
    for layers, hidden in ((2, 128), (4, 256), (6, 512), (10, 640), (12, 768), (24, 768)):
        for gpu in ("Tesla V100-SXM2-32GB", "NVIDIA GeForce RTX 2080 Ti"):
            for strategy, n, eta in (("baseline", 1, 1.0), ("fsdp", 2, 0.5), ("tp", 2, 0.2), ("tp", 4, 0.1)):
                t1 = 2e-6 * layers * hidden / 128.0
                kwh = 1e-12 * layers * hidden**2 * 8e6 / eta * math.exp(rng.normal(0, 0.05))
                rows.append(f"{gpu},x,{strategy},{n},{layers},{hidden},{hidden // 64},{4 * hidden},32,66,66,1,False,"
                            f"8e6,{t1 * 8e6 / (eta * n)},{kwh}")
    pathlib.Path(path).write_text("\n".join(rows) + "\n")


def test_fit_equals_the_cli(tmp_path, cli):
    csv = tmp_path / "runs.csv"
    study_csv(csv)
    expected = json.loads(cli("energy", "fit", csv, "--folds", 4, "--out", tmp_path / "cli", "--hardware", HARDWARE,
                              "--json").stdout)
    got = mn.energy.fit(str(csv), folds=4, out=str(tmp_path / "py"), hardware=HARDWARE)
    assert got["json_path"].endswith("py.json") and pathlib.Path(got["svg_path"]).exists()
    for key in ("json_path", "svg_path"):
        got.pop(key), expected.pop(key)
    assert got == expected and got["rows"] == 48
    with pytest.raises(ValueError, match="--folds must be at least 2"):
        mn.energy.fit(str(csv), folds=1)


def test_power_limit_and_tp_scheme_change_the_prediction():
    base = dict(layers=12, hidden=768, batch=32, seq=128, tokens=3.84e7, dtype="fp16", gpu="a40", hardware=HARDWARE)
    full, low = mn.energy.predict(**base), mn.energy.predict(**base, power_limit=200)
    assert full["physical"]["power_limit_w"] == 300 and low["physical"]["power_limit_w"] == 200
    assert low["physical"]["time_s"] > full["physical"]["time_s"]
    assert low["physical"]["average_power_w"] < full["physical"]["average_power_w"]
    tp = dict(base, gpu="rtx-2080-ti", gpus=2, strategy="tp")
    assert mn.energy.predict(**tp, tp_scheme="ffn")["physical"]["tp_scheme"] == "ffn"
    assert mn.energy.predict(**tp)["physical"]["tp_scheme"] == "megatron"
    with pytest.raises(ValueError, match="lies outside a40's range"):
        mn.energy.predict(**base, power_limit=20)
    with pytest.raises(ValueError, match="tp_scheme|megatron"):
        mn.energy.predict(**tp, tp_scheme="diagonal")


def test_recommend_equals_the_cli(tmp_path, cli):
    flags = dict(layers=12, hidden=768, batch=32, seq=128, tokens=3.84e7, dtype="fp16")
    args = []
    for k, v in flags.items():
        args += ["--" + k, v]
    expected = json.loads(cli("energy", "recommend", *args, "--gpu", "a40,l4", "--batches", "16,32",
                              "--hardware", HARDWARE, "--json").stdout)
    got = mn.energy.recommend(**flags, gpu=["a40", "l4"], batches=[16, 32], hardware=HARDWARE,
                              svg=str(tmp_path / "r.svg"))
    assert pathlib.Path(got.pop("svg_path")).exists()
    assert got == expected
    a40 = got["recommendations"][0]
    assert a40["device"] == "a40" and a40["min_energy"]["power_limit_w"] < a40["tdp_w"]
    assert mn.energy.recommend(**flags, gpu="a40", hardware=HARDWARE)["recommendations"][0]["device"] == "a40"
    with pytest.raises(TypeError, match="unexpected keyword argument 'power_limit'"):
        mn.energy.recommend(**flags, gpu="a40", power_limit=200)
    with pytest.raises(ValueError, match="needs --gpu"):
        mn.energy.recommend(**flags, hardware=HARDWARE)

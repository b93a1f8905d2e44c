#!/usr/bin/python3
"""Load SmolLM2 weights into Meganeura and into PyTorch, run the same tokens through both, and
compare the logits, all in one script.

    PYTHONPATH=build/python python3 examples/python/smollm2_vs_torch.py --weights DIR
    PYTHONPATH=build/python python3 examples/python/smollm2_vs_torch.py            # no download

--weights takes the Hugging Face snapshot of HuggingFaceTB/SmolLM2-135M (a directory holding
model.safetensors, or a .safetensors / index .json file; bf16 weights are widened to float32 on
both sides). Without it, the script makes seeded random weights at --scale (ci by default, or
full: the 134.5M-parameter configuration), writes them with their Hugging Face names and loads
them back the same way. Token ids come from --ids or are drawn from the seed (no tokenizer is
needed). PyTorch runs the project's reference model (bench/reference/models.py, the module
layout of Hugging Face's Llama) in strict float32 on the CPU.

Both sides compute in float32 but sum in different orders, so the logits agree to rounding, not
bit for bit: the script fails (exit status 1) when their relative L2 difference exceeds 1e-4.
"""
import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

import meganeura as mn

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "reference"))


def torch_logits(scale, weights, ids):
    import torch

    import models  # bench/reference/models.py

    torch.backends.mkldnn.enabled = False  # strict f32 (docs/workloads.md: oneDNN's GELU defect)
    torch.set_float32_matmul_precision("highest")
    model = models.build("smollm2", scale).float().eval()
    state = model.state_dict()
    with torch.no_grad():
        for name, t in state.items():
            if name not in weights:
                raise SystemExit(f"torch: tensor '{name}' is missing from the weights")
            t.copy_(torch.from_numpy(np.ascontiguousarray(weights[name], dtype=np.float32)))
        inputs = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(ids[0])}
        start = time.perf_counter()
        outputs, _ = model.run(inputs)
        seconds = time.perf_counter() - start
    return outputs["logits"].numpy(), seconds


def random_weights(g, seed, directory):
    """Seeded weights with the Hugging Face names, written as the model's safetensors file."""
    path = pathlib.Path(directory) / "model.safetensors"
    mn.compile(g, "cpu", seed=seed).save_weights(g, path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", help="SmolLM2-135M weights: a snapshot directory or a safetensors/index file")
    ap.add_argument("--scale", choices=["ci", "full"], help="model size without --weights (default ci)")
    ap.add_argument("--ids", help="space-separated token ids (as many as the scale's sequence length)")
    ap.add_argument("--device", default="cpu", help="cpu | vulkan | auto")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    scale = "full" if a.weights else (a.scale or "ci")

    g = mn.Graph()
    w = mn.workloads.build(g, "smollm2", scale)
    g.output("logits", w.outputs["logits"])  # the forward pass only: no loss, no gradients
    seq = dict((i["name"], i["shape"]) for i in w.inputs)["input_ids"][1]
    if a.ids:
        ids = np.array([[int(t) for t in a.ids.split()]], np.int32)
        if ids.shape != (1, seq):
            raise SystemExit(f"--ids: {ids.shape[1]} token ids, the {scale} model takes {seq}")
    else:
        vocab = g.find("model.embed_tokens.weight").shape[0]
        ids = np.random.default_rng(a.seed).integers(0, vocab, (1, seq)).astype(np.int32)

    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(a.weights) if a.weights else random_weights(g, a.seed, tmp)
        start = time.perf_counter()
        session = mn.compile(g, a.device)
        loaded = session.load_weights(g, path)
        ready = time.perf_counter() - start
        start = time.perf_counter()
        ours = session.run({"input_ids": ids})["logits"]
        ours_s = time.perf_counter() - start
        # The same file for PyTorch (every tensor, bf16 widened to float32; the tied lm_head is unused).
        reference, torch_s = torch_logits(scale, mn.read_weights(path), ids)

    diff = ours.astype(np.float64) - reference
    rel_l2 = np.linalg.norm(diff) / np.linalg.norm(reference)
    agree = (ours.argmax(-1) == reference.argmax(-1)).mean()
    print(f"SmolLM2 ({scale}, {mn.workloads.parameter_count(g):,} parameters, {loaded} tensors loaded from {path})")
    print(f"meganeura on {session.device_name}: ready in {ready:.2f} s, first forward {ours_s * 1e3:.1f} ms")
    print(f"pytorch on the cpu: first forward {torch_s * 1e3:.1f} ms")
    print(f"logits {ours.shape}: relative L2 difference {rel_l2:.2e}, largest difference {np.abs(diff).max():.2e}, "
          f"same next token at {agree * 100:.1f}% of positions")
    if not rel_l2 < 1e-4:
        print("FAIL: the logits differ by more than float32 rounding explains (relative L2 >= 1e-4)")
        sys.exit(1)


if __name__ == "__main__":
    main()

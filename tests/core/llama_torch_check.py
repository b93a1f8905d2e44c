"""`meganeura llama` against an independent PyTorch Llama forward written here in float64.

Writes a small Llama checkpoint the way a Hugging Face export lays it out (config.json, two
safetensors shards written by hand from the format's specification, model.safetensors.index.json),
with GQA (4 query heads, 2 key-value heads), runs `meganeura llama --dump` on it and compares the
logits. Cases: untied lm_head, tied embeddings (no lm_head.weight in the files), and Llama 3 rope
scaling (untied, one shard in bfloat16).

Tolerance: relative L2 error 1e-4. Ours runs in float32 and the reference in float64 on the same
weights (bfloat16 values are exact in both), so the difference is f32 rounding through two
layers of width 32 (reductions over at most 48 terms): ~1e-6 expected, 1e-4 leaves margin. A
wrong formula moves the logits by far more, which the negative control shows: the Llama 3 case
must differ from the reference computed without scaling by more than 1e-3.

Usage: llama_torch_check.py MEGANEURA_BINARY WORK_DIR [cpu|vulkan]"""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
CASES = {
    "untied": {"tie_word_embeddings": False},
    "tied": {"tie_word_embeddings": True},
    # head_dim 8: wavelengths 2 pi 10000^(i/4) = 6.3, 63, 628, 6283 against L / high = 4 and
    # L / low = 16: pair 0 blended, pairs 1-3 divided by the factor.
    "llama3": {"tie_word_embeddings": False, "rope_theta": 10000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
}
IDS = [[5, 17, 63, 0, 42, 8, 8, 31, 2, 50, 11], [60, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
TOLERANCE = 1e-4


def weights(cfg, rng):
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    t = {"model.embed_tokens.weight": rng.normal(0, 1.0, (v, h)), "model.norm.weight": 1 + rng.normal(0, 0.1, (h,))}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        for name, shape in {"self_attn.q_proj.weight": (q, h), "self_attn.k_proj.weight": (kv, h),
                            "self_attn.v_proj.weight": (kv, h), "self_attn.o_proj.weight": (h, q),
                            "mlp.gate_proj.weight": (f, h), "mlp.up_proj.weight": (f, h),
                            "mlp.down_proj.weight": (h, f)}.items():
            t[p + name] = rng.normal(0, 1 / math.sqrt(shape[1]), shape)
        t[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, (h,))
        t[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, (h,))
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = rng.normal(0, 1 / math.sqrt(h), (v, h))
    return {n: a.astype(np.float32) for n, a in t.items()}


def bf16_round(a):
    """Round to nearest even; returns (bytes, the float32 values those bytes hold)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u.tobytes(), (u.astype(np.uint32) << 16).view(np.float32).reshape(a.shape)


def write_shard(path, named):  # name -> (dtype, array); the format's JSON header and raw bytes
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, a) in sorted(named.items()):
        raw = bf16_round(a)[0] if dtype == "BF16" else np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_f32(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    e = header[name]
    assert e["dtype"] == "F32", e
    b, end = e["data_offsets"]
    return np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"])


def write_checkpoint(folder, cfg, t, bf16_first):
    """Shard 1: the embedding and layer 0 (bf16 when asked, the values rounded in `t` too)."""
    os.makedirs(folder, exist_ok=True)
    first = {n for n in t if n.startswith(("model.embed", "model.layers.0."))}
    files = {1: {}, 2: {}}
    for n, a in t.items():
        if n in first and bf16_first:
            t[n] = bf16_round(a)[1]
            files[1][n] = ("BF16", t[n])
        else:
            files[1 if n in first else 2][n] = ("F32", a)
    weight_map = {}
    for i, named in files.items():
        file = f"model-0000{i}-of-00002.safetensors"
        write_shard(os.path.join(folder, file), named)
        weight_map.update({n: file for n in named})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as out:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, out)
    with open(os.path.join(folder, "config.json"), "w") as out:
        json.dump(cfg, out)


# ---- the reference: transformers' LlamaForCausalLM forward, written out in float64 -----

def inv_freq(cfg, scaled=True):
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    f = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = cfg.get("rope_scaling")
    if not scaled or not rs:
        return f
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    out = torch.where(wavelen > old / low, f / factor, f)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, out)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def reference(cfg, t, ids, scaled=True):
    w = {n: torch.tensor(a, dtype=torch.float64) for n, a in t.items()}
    heads, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = cfg["hidden_size"] // heads, cfg["rms_norm_eps"]
    ids = torch.tensor(ids)
    b, s = ids.shape
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq(cfg, scaled))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, s, heads, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, s, kvh, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, s, kvh, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kvh, dim=1)  # repeat_kv: query head i reads kv head i // groups
        v = v.repeat_interleave(heads // kvh, dim=1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1) @ v
        x = x + a.transpose(1, 2).reshape(b, s, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + g @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return (x @ head.T).numpy()


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main(binary, work, device):
    failures = []
    for i, (case, extra) in enumerate(CASES.items()):
        cfg = dict(BASE, **extra)
        t = weights(cfg, np.random.default_rng(100 + i))
        folder = os.path.join(work, case)
        write_checkpoint(folder, cfg, t, bf16_first=(case == "llama3"))
        dump = os.path.join(folder, "logits.safetensors")
        cmd = [binary, "llama", "--config", folder, "--weights", folder, "--device", device, "--dump", dump]
        for seq in IDS:
            cmd += ["--input-ids", ",".join(map(str, seq))]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            failures.append(f"{case}: meganeura llama failed: {run.stderr.strip()}")
            continue
        report = json.loads(run.stdout)
        ours = read_f32(dump, "logits")
        ref = reference(cfg, t, IDS)
        err = rel_l2(ours, ref)
        want_next = [int(np.argmax(ref[b, -1])) for b in range(len(IDS))]
        print(f"{case} ({device}): relative L2 {err:.3g}, next tokens {report['next_token']} (reference {want_next})")
        if ours.shape != ref.shape or not err < TOLERANCE:
            failures.append(f"{case}: relative L2 {err:.3g} over {TOLERANCE}")
        if report["next_token"] != want_next:
            failures.append(f"{case}: next tokens {report['next_token']}, reference {want_next}")
        if cfg.get("rope_scaling"):
            unscaled = rel_l2(ours, reference(cfg, t, IDS, scaled=False))
            print(f"{case}: relative L2 to the unscaled reference {unscaled:.3g} (negative control, must exceed 1e-3)")
            if not unscaled > 1e-3:
                failures.append(f"{case}: indistinguishable from the unscaled rotation ({unscaled:.3g})")
    for f in failures:
        print("FAIL", f)
    print("PASS" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "cpu"))

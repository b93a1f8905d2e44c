"""Writes a SmolLM2-architecture checkpoint (the workload's ci scale) the way a Hugging Face
export lays it out, with nothing but numpy and the format's specification: Llama tensor names
and [out, in] projection layouts, bfloat16 and float32 shards, model.safetensors.index.json,
tied embeddings (no lm_head.weight) and the rotary buffers some exports carry. Independent of
the project's own safetensors writer on purpose; the gate then loads it on both sides."""
import json
import os
import struct
import sys

import numpy as np

# config.json of the ci scale (docs/workloads.md): hidden 96, 6 query / 2 key-value heads of 16,
# SwiGLU 256, vocabulary 512, 2 layers.
CONFIG = {"hidden_size": 96, "intermediate_size": 256, "num_attention_heads": 6,
          "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512, "tie_word_embeddings": True}


def tensors(rng):
    h, f = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    hd = h // CONFIG["num_attention_heads"]
    kv = CONFIG["num_key_value_heads"] * hd
    t = {"model.embed_tokens.weight": rng.normal(0, 0.5, (CONFIG["vocab_size"], h)),
         "model.norm.weight": 1 + rng.normal(0, 0.1, (h,))}
    for layer in range(CONFIG["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes = {"self_attn.q_proj.weight": (h, h), "self_attn.k_proj.weight": (kv, h),
                  "self_attn.v_proj.weight": (kv, h), "self_attn.o_proj.weight": (h, h),
                  "mlp.gate_proj.weight": (f, h), "mlp.up_proj.weight": (f, h), "mlp.down_proj.weight": (h, f)}
        for name, shape in shapes.items():
            t[p + name] = rng.normal(0, 1 / np.sqrt(shape[1]), shape)
        t[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, (h,))
        t[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, (h,))
    return t


def bf16_bytes(a):
    """Round to nearest even, as exporters do."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def write_shard(path, named):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, a) in named.items():
        raw = bf16_bytes(a) if dtype == "BF16" else np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(folder):
    os.makedirs(folder, exist_ok=True)
    t = tensors(np.random.default_rng(7))
    names = sorted(t)
    # shard 1: the embedding and layer 0 in bfloat16; shard 2: the rest in float32
    first = {n: ("BF16", t[n]) for n in names if n.startswith(("model.embed", "model.layers.0."))}
    second = {n: ("F32", t[n]) for n in names if n not in first}
    second["model.layers.0.self_attn.rotary_emb.inv_freq"] = ("F32", np.ones(8))  # buffer, not a parameter
    shards = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
    weight_map = {}
    for file, named in shards.items():
        write_shard(os.path.join(folder, file), named)
        weight_map.update({n: file for n in named})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as out:
        json.dump({"metadata": {"total_size": sum(a.size * 4 for a in t.values())}, "weight_map": weight_map}, out)
    with open(os.path.join(folder, "config.json"), "w") as out:
        json.dump(CONFIG, out)


if __name__ == "__main__":
    main(sys.argv[1])

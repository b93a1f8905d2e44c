"""PyTorch eager generation with a key/value cache: the reference of bench/generate/run.py.

The model is tests/core/llama_kv_torch_check.py's CachedLlama (the test's reference, keys and
values appended per step as Hugging Face's DynamicCache does), here in float32 with random
weights of the config's shape. Greedy; prints one JSON object: median prefill and decode
tokens per second over the repetitions after one warm-up, and this process's peak RSS.

Usage: torch_generate.py CONFIG_JSON PROMPT_TOKENS NEW_TOKENS THREADS REPETITIONS"""
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "core"))
from llama_kv_torch_check import CachedLlama  # noqa: E402


def random_weights(cfg, gen):
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim", h // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                       p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                       p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,)})
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, h)
    return {n: torch.randn(s, generator=gen) * 0.02 for n, s in shapes.items()}


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return -1


def main(config, prompt_tokens, new_tokens, threads, reps):
    torch.set_num_threads(threads)
    with open(config) as f:
        cfg = json.load(f)
    gen = torch.Generator().manual_seed(0)
    weights = random_weights(cfg, gen)
    prompt = torch.randint(0, cfg["vocab_size"], (prompt_tokens,), generator=gen).tolist()
    prefill, decode = [], []
    with torch.inference_mode():
        for rep in range(reps + 1):
            model = CachedLlama(cfg, weights, dtype=torch.float32)
            t0 = time.perf_counter()
            logits = model.step(prompt)
            token = int(logits.argmax())
            t1 = time.perf_counter()
            for _ in range(new_tokens - 1):
                token = int(model.step([token]).argmax())
            t2 = time.perf_counter()
            if rep > 0:  # the first is a warm-up
                prefill.append(prompt_tokens / (t1 - t0))
                decode.append((new_tokens - 1) / (t2 - t1))
    print(json.dumps({"prefill_tokens_per_second": statistics.median(prefill),
                      "decode_tokens_per_second": statistics.median(decode),
                      "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "peak_rss_mb": peak_rss_mb()}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))

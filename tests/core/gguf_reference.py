#!/usr/bin/env python3
"""An independent GGUF writer, reader and block decoder, written from the published layout
(version 3; Q8_0, Q4_0 and Q4_K blocks) with Python's struct module only, for core_gguf_test.

  gguf_reference.py write OUT.gguf EXPECTED.json   writes a file with metadata of every value
      type and tensors of every supported element type, and the decoded values it expects
  gguf_reference.py check IN.gguf                  reads a file (written by the C++ writer) and
      prints its metadata, tensor infos and decoded tensors as JSON

Also imported by tests/fuzz/make_seeds.py for the fuzz target's seeds."""
import json
import random
import struct
import sys

TYPES = {"u8": (0, "B"), "i8": (1, "b"), "u16": (2, "H"), "i16": (3, "h"), "u32": (4, "I"), "i32": (5, "i"),
         "f32": (6, "f"), "bool": (7, "?"), "string": (8, None), "array": (9, None), "u64": (10, "Q"),
         "i64": (11, "q"), "f64": (12, "d")}
CODES = {code: (name, fmt) for name, (code, fmt) in TYPES.items()}
# ggml element types: (number, block elements, block bytes)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144),
        "BF16": (30, 1, 2)}
GGML_BY_CODE = {v[0]: (k, v[1], v[2]) for k, v in GGML.items()}


def pack_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def pack_value(kind, value):
    if kind == "string":
        return pack_string(value)
    if kind == "array":
        element, items = value
        out = struct.pack("<IQ", TYPES[element][0], len(items))
        return out + b"".join(pack_value(element, v) for v in items)
    return struct.pack("<" + TYPES[kind][1], value)


def write(path, metadata, tensors, alignment=32):
    """metadata: [(key, kind, value)]; tensors: [(name, ggml type, row-major shape, bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        out += pack_string(key) + struct.pack("<I", TYPES[kind][0]) + pack_value(kind, value)
    offset, offsets = 0, []
    for name, kind, shape, data in tensors:
        offset = (offset + alignment - 1) // alignment * alignment
        out += pack_string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", GGML[kind][0], offset)
        offsets.append(offset)
        offset += len(data)
    out += b"\0" * ((alignment - len(out) % alignment) % alignment)
    start = len(out)
    for (name, kind, shape, data), at in zip(tensors, offsets):
        out += b"\0" * (start + at - len(out)) + data
    with open(path, "wb") as f:
        f.write(out)


def half(b, at):
    return struct.unpack_from("<e", b, at)[0]


def decode(kind, data, n):
    if kind == "F32":
        return list(struct.unpack("<%df" % n, data))
    if kind == "F16":
        return list(struct.unpack("<%de" % n, data))
    if kind == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % n, data)]
    out = []
    _, block, size = GGML[kind]
    for at in range(0, len(data), size):
        b = data[at:at + size]
        if kind == "Q8_0":
            d = half(b, 0)
            out += [d * q for q in struct.unpack("<32b", b[2:34])]
        elif kind == "Q4_0":
            d = half(b, 0)
            out += [d * ((x & 15) - 8) for x in b[2:18]] + [d * ((x >> 4) - 8) for x in b[2:18]]
        else:  # Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
            d, dmin, s, qs = half(b, 0), half(b, 2), b[4:16], b[16:144]
            for j in range(8):
                if j < 4:
                    sc, mn = s[j] & 63, s[j + 4] & 63
                else:
                    sc, mn = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, (s[j + 4] >> 4) | (s[j] >> 6) << 4
                group, high = j // 2, j % 2
                out += [d * sc * ((qs[32 * group + l] >> (4 * high)) & 15) - dmin * mn for l in range(32)]
    return out


def random_blocks(kind, blocks, rng):
    """Valid blocks of random bytes: f16 scales of moderate size (no inf or NaN)."""
    _, block, size = GGML[kind]
    out = b""
    for _ in range(blocks):
        b = bytearray(rng.getrandbits(8) for _ in range(size))
        for at in ((0,) if kind != "Q4_K" else (0, 2)):
            b[at:at + 2] = struct.pack("<e", rng.uniform(-2, 2) if kind != "Q4_K" else rng.uniform(0, 0.1))
        out += bytes(b)
    return out


def example(seed=1):
    rng = random.Random(seed)
    metadata = [("general.architecture", "string", "llama"), ("general.name", "string", "tëst ✓"),
                ("u8", "u8", 250), ("i8", "i8", -100), ("u16", "u16", 65000), ("i16", "i16", -32000),
                ("u32", "u32", 4000000000), ("i32", "i32", -2000000000), ("f32", "f32", 0.375),
                ("yes", "bool", True), ("no", "bool", False), ("u64", "u64", 2 ** 63 + 5), ("i64", "i64", -2 ** 62),
                ("f64", "f64", -1.0e-300), ("empty", "string", ""),
                ("tokens", "array", ("string", ["a", "", "ĠThe", "<|end|>"])),
                ("scores", "array", ("f32", [0.5, -1.25])),
                ("nested", "array", ("array", [("i32", [1, 2]), ("i32", [])]))]
    floats = [rng.uniform(-3, 3) for _ in range(6)]
    tensors = [("t.f32", "F32", [2, 3], struct.pack("<6f", *floats)),
               ("t.f16", "F16", [3, 2], struct.pack("<6e", *floats)),
               ("t.bf16", "BF16", [6], b"".join(struct.pack("<f", x)[2:] for x in floats)),
               ("t.q8_0", "Q8_0", [2, 64], random_blocks("Q8_0", 4, rng)),
               ("t.q4_0", "Q4_0", [1, 32], random_blocks("Q4_0", 1, rng)),
               ("t.q4_k", "Q4_K", [2, 256], random_blocks("Q4_K", 2, rng))]
    return metadata, tensors


def read(path):
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", "magic"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    at = 24

    def string():
        nonlocal at
        (n,) = struct.unpack_from("<Q", b, at)
        s = b[at + 8:at + 8 + n].decode()
        at += 8 + n
        return s

    def value(code):
        nonlocal at
        name, fmt = CODES[code]
        if name == "string":
            return string()
        if name == "array":
            element, count = struct.unpack_from("<IQ", b, at)
            at += 12
            return [value(element) for _ in range(count)]
        (v,) = struct.unpack_from("<" + fmt, b, at)
        at += struct.calcsize(fmt)
        return v

    metadata = {}
    for _ in range(n_kv):
        key = string()
        (code,) = struct.unpack_from("<I", b, at)
        at += 4
        metadata[key] = value(code)
    alignment = metadata.get("general.alignment", 32)
    infos = []
    for _ in range(n_tensors):
        name = string()
        (rank,) = struct.unpack_from("<I", b, at)
        dims = struct.unpack_from("<%dQ" % rank, b, at + 4)
        code, offset = struct.unpack_from("<IQ", b, at + 4 + 8 * rank)
        at += 4 + 8 * rank + 12
        infos.append((name, list(reversed(dims)), code, offset))
    start = (at + alignment - 1) // alignment * alignment
    tensors = {}
    for name, shape, code, offset in infos:
        kind, block, size = GGML_BY_CODE[code]
        n = 1
        for d in shape:
            n *= d
        assert offset % alignment == 0, name
        data = b[start + offset:start + offset + n // block * size]
        tensors[name] = {"type": kind, "shape": shape, "offset": offset, "values": decode(kind, data, n)}
    return {"version": version, "metadata": metadata, "tensors": tensors}


def main():
    if sys.argv[1] == "write":
        metadata, tensors = example()
        metadata.append(("general.alignment", "u32", 64))
        write(sys.argv[2], metadata, tensors, alignment=64)
        expected = {}
        for name, kind, shape, data in tensors:
            n = 1
            for d in shape:
                n *= d
            expected[name] = {"type": kind, "shape": shape, "values": decode(kind, data, n)}
        with open(sys.argv[3], "w") as f:
            json.dump(expected, f)
    else:
        json.dump(read(sys.argv[2]), sys.stdout)


if __name__ == "__main__":
    main()

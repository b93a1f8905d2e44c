"""Independent safetensors writer and reader (struct + json + numpy only), used to check
that the C++ implementation interoperates with the published format.

  interop.py write PATH            write the fixed tensor set below
  interop.py read PATH NAME...     check that PATH holds exactly NAME... with formula values

Every element at flat index i holds value(dtype, i); the C++ test computes the same.
"""
import json
import struct
import sys

import numpy as np

NUMPY = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32,
         "U32": np.uint32, "BF16": np.uint16}
SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "U32": 4}


def values(dtype, n):
    i = np.arange(n, dtype=np.int64)
    if dtype in ("F32", "F16", "BF16"):
        v = ((i * 37) % 101 - 50) / 8.0  # exact in all three formats
        if dtype == "BF16":
            return (v.astype("<f4").view("<u4") >> 16).astype("<u2")
        return v.astype("<" + np.dtype(NUMPY[dtype]).str[1:])
    if dtype == "F64":
        return (i * 0.1 - 3.0).astype("<f8")
    wrapped = (i * 2654435761) % (1 << 32)  # spans the whole 32-bit range
    return wrapped.astype("<u4").view("<i4" if dtype == "I32" else "<u4")


WRITE_SET = [("py.f32", "F32", [3, 4]), ("py.f16", "F16", [5]), ("py.bf16", "BF16", [2, 3]),
             ("py.i32", "I32", [7]), ("py.u32", "U32", [2, 2]), ("py.f64", "F64", [3]),
             ("py.scalar", "F32", []), ("py.empty", "F32", [0, 3])]


def write(path):
    header, blobs, offset = {"__metadata__": {"writer": "python", "step": "5"}}, [], 0
    # Reverse name order and no header padding: both are legal and a reader must cope.
    for name, dtype, shape in sorted(WRITE_SET, reverse=True):
        blob = values(dtype, int(np.prod(shape, dtype=np.int64))).tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path, names):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
    assert sorted(header) == sorted(names), "tensors %s, expected %s" % (sorted(header), sorted(names))
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    cursor = 0
    for begin, end in spans:
        assert begin == cursor, "data section has a hole or overlap at %d" % begin
        cursor = end
    assert cursor == len(body), "data section is %d bytes, tensors cover %d" % (len(body), cursor)
    checked = 0
    for name, e in header.items():
        count = int(np.prod(e["shape"], dtype=np.int64))
        begin, end = e["data_offsets"]
        assert end - begin == count * SIZE[e["dtype"]], name + ": byte size does not match shape"
        got = np.frombuffer(body[begin:end], dtype=values(e["dtype"], 0).dtype)
        want = values(e["dtype"], count)
        bad = np.nonzero(got.view(np.uint8) != want.view(np.uint8))[0]
        assert bad.size == 0, "%s: byte %d differs" % (name, bad[0] if bad.size else -1)
        checked += count
    print("checked %d tensors, %d elements, metadata %s" % (len(header), checked, json.dumps(meta, sort_keys=True)))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        read(sys.argv[2], sys.argv[3:])

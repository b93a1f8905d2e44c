"""Minimal safetensors reading and writing with numpy (the format: an 8-byte little-endian
header length, a JSON header of name -> dtype/shape/data_offsets, then the raw data)."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read(path):
    """One safetensors file, or a sharded checkpoint's model.safetensors.index.json."""
    if str(path).endswith(".json"):
        import os
        with open(path) as f:
            index = json.load(f)
        out = {}
        for shard in sorted(set(index["weight_map"].values())):
            out.update(read(os.path.join(os.path.dirname(str(path)), shard)))
        return {k: out[k] for k in index["weight_map"]}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] == "BF16":
            b, e = info["data_offsets"]
            raw = np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(info["shape"])
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def write(path, tensors, metadata=None):
    header, offset, chunks = {}, 0, []
    for name in sorted(tensors):
        a = np.array(tensors[name], order="C", copy=True)
        raw = a.tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)

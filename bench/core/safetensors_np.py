"""A small safetensors reader on numpy alone, for the benchmark's scripts.

Reads the 8-byte little-endian header length, the JSON header and the tensors it names
(F32, F64, I32, I64), checking every offset against the file.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


class SafetensorsError(ValueError):
    pass


def read_safetensors(path):
    """Returns ({name: ndarray}, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise SafetensorsError(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(blob[8:8 + n])
    except ValueError as e:
        raise SafetensorsError(f"{path}: header is not JSON ({e})") from None
    metadata = header.pop("__metadata__", {})
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, info in header.items():
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise SafetensorsError(f"{path}: tensor {name} has unsupported dtype {info.get('dtype')}")
        begin, end = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * np.dtype(dtype).itemsize:
            raise SafetensorsError(f"{path}: tensor {name} has offsets {begin}..{end} that do not fit "
                                   f"shape {info['shape']} in a data section of {len(data)} bytes")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"]).copy()
    return tensors, metadata

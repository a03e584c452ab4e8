# st_lib.py — safetensors written and read by hand for the weights tests
# (test_train_weights.py, test_train_wan22.py): the files a test makes in every dtype and
# naming, written here without the project's writer so the reader is checked against an
# independent one.
import json
import struct

import numpy as np


def write_st(path, tensors, header_len=None):
    """safetensors by hand: tensors = {name: (dtype, shape, raw bytes)}."""
    hdr, off, blobs = {}, 0, []
    for name in sorted(tensors):
        dt, shape, raw = tensors[name]
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", header_len if header_len is not None else len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_st(path):
    """{name: f32 array} of an F32 safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], dtype="<f4").reshape(v["shape"]).copy()
    return out


def f32(tensors):
    return {k: ("F32", v.shape, v.astype("<f4").tobytes()) for k, v in tensors.items()}


def bf16(v):
    """BF16 bytes of v (round to nearest even) and the f32 values they stand for."""
    u = v.astype("<f4").view("<u4").astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return r.tobytes(), (r.astype("<u4") << 16).view("<f4")

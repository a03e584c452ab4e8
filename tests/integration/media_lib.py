"""media_lib.py — helpers the sampling and video tests share (not a test itself):
F32 safetensors files written and read by hand (no safetensors package needed), and the
PSNR of two RGB24 byte strings."""
import json
import math
import struct


def st_write(path, tensors):
    """A safetensors file of F32 tensors {name: (shape, list)}."""
    hdr, blobs, off = {}, [], 0
    for name, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path, name):
    """(shape, values) of F32 tensor `name`."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        t = hdr[name]
        a, b = t["data_offsets"]
        f.seek(8 + n + a)
        return t["shape"], struct.unpack("<%df" % ((b - a) // 4), f.read(b - a))


def psnr(a, b):
    """PSNR in dB of two equal-length 8-bit sample strings (99 when identical)."""
    mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)

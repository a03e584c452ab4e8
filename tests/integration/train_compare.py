#!/usr/bin/python3
# train_compare.py — compares training runs to rounding (shared by test_train_determinism.sh
# and test_train_replicas.sh; a helper, not a test itself).
#
#   train_compare.py TOL STEP REF_DIR DIR...
#
# For each DIR against REF_DIR: the relative L2 distance of all weights of the checkpoint
# at STEP (model.safetensors, tensors by name; VF_COMPARE_FILE=lora.safetensors compares
# a LoRA run's adapters instead), and the largest relative difference of
# the loss and of the gradient norm over steps 1..STEP of metrics.jsonl. Prints them and
# exits 1 when any exceeds TOL (or a run lacks a tensor or a step).
import json
import os
import struct
import sys

import numpy as np


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            for k, v in h.items() if k != "__metadata__"}


def steps(d):
    return {r["step"]: r for r in map(json.loads, open(d + "/metrics.jsonl")) if r.get("event") == "train_step"}


def rel_diff(a, b):
    """|a - b| / |a|; two zeros (a LoRA's first gradient norm, B starting at zero) agree"""
    if a == 0:
        return 0.0 if b == 0 else float("inf")
    return abs(a - b) / abs(a)


def main():
    tol, last, ref_dir, others = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    model = "/ckpt/step-%d/%s" % (last, os.environ.get("VF_COMPARE_FILE", "model.safetensors"))
    A, la = load(ref_dir + model), steps(ref_dir)
    va = np.concatenate([A[k] for k in sorted(A)]).astype(np.float64)
    ok = True
    for d in others:
        B, lb = load(d + model), steps(d)
        if sorted(A) != sorted(B) or any(s not in la or s not in lb for s in range(1, last + 1)):
            print("%s vs %s: other tensors or missing steps" % (d, ref_dir))
            ok = False
            continue
        vb = np.concatenate([B[k] for k in sorted(A)]).astype(np.float64)
        rel = np.linalg.norm(va - vb) / np.linalg.norm(va)
        loss = max(rel_diff(la[s]["loss"], lb[s]["loss"]) for s in range(1, last + 1))
        gn = max(rel_diff(la[s]["grad_norm"], lb[s]["grad_norm"]) for s in range(1, last + 1))
        print("%s vs %s: weights rel L2 %.2e, loss rel %.2e, grad norm rel %.2e" % (d, ref_dir, rel, loss, gn))
        ok = ok and rel <= tol and loss <= tol and gn <= tol
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

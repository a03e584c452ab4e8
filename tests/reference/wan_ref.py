"""wan_ref.py — imports diffusers' and transformers' Wan classes on Debian's torch 1.13.

The reference venv (scripts/setup.sh, $VFLOW_REF_PY) holds diffusers 0.33.1 and
transformers 4.46.3 over Debian's torch 1.13.1. Two names diffusers touches are missing
there: F.scaled_dot_product_attention (defined here as softmax(q·kᵀ·scale + mask)·v, the
math it stands for), the float8 dtype names (placeholders: nothing here uses float8;
safetensors.torch is imported first so that its tables never see them) and
torch.compiler.disable, a decorator on DiffusionPipeline (the identity: nothing here is
compiled). Import this module before diffusers.
"""
import math
import os
import sys
import types

import torch
import torch.nn.functional as F

if not hasattr(F, "scaled_dot_product_attention"):
    def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        a = torch.matmul(q, k.transpose(-2, -1)) * s
        if is_causal:
            L, S = q.shape[-2], k.shape[-2]
            a = a.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                a = a.masked_fill(~attn_mask, float("-inf"))
            else:
                a = a + attn_mask
        return torch.matmul(a.softmax(-1), v)
    F.scaled_dot_product_attention = _sdpa

# safetensors.torch builds its dtype tables when imported: before the placeholders, or its
# byte-size table says float32 is 1 byte wide and save_file (save_pretrained) refuses.
try:
    import safetensors.torch  # noqa: F401
except ImportError:
    pass

for _n in ("float8_e4m3fn", "float8_e5m2"):
    if not hasattr(torch, _n):
        setattr(torch, _n, torch.float32)

if not hasattr(torch, "compiler"):
    def _disable(fn=None, recursive=True):
        return fn if fn is not None else (lambda f: f)
    torch.compiler = types.SimpleNamespace(disable=_disable)


def require():
    """Exit 77 (ctest skip) when the reference packages are not importable."""
    try:
        import diffusers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: Wan reference packages missing ({e}); run scripts/setup.sh", file=sys.stderr)
        sys.exit(77)


def reexec_in_ref_venv():
    """Run this script again under $VFLOW_REF_PY when the current python lacks diffusers."""
    try:
        import diffusers  # noqa: F401
        return
    except ImportError:
        pass
    py = os.environ.get("VFLOW_REF_PY", "/opt/vflow-ref/bin/python")
    # A venv's python is a symlink to the system one: compare prefixes, not real paths.
    venv = os.path.dirname(os.path.dirname(os.path.abspath(py)))
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(venv) \
            and not os.environ.get("VFLOW_REF_REEXEC"):
        os.environ["VFLOW_REF_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)
    require()

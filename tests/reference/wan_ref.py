"""wan_ref.py — imports diffusers' and transformers' Wan classes on Debian's torch 1.13.

The reference venv (scripts/setup.sh, $VFLOW_REF_PY) holds diffusers 0.33.1 and
transformers 4.46.3 over Debian's torch 1.13.1. Two names diffusers touches are missing
there: F.scaled_dot_product_attention (defined here as softmax(q·kᵀ·scale + mask)·v, the
math it stands for, taking q, k, v by position or as query=, key=, value=), the float8
dtype names (placeholders: nothing here uses float8; safetensors.torch is imported first
so that its tables never see them) and torch.compiler.disable / is_compiling, a decorator
on DiffusionPipeline and a query (the identity and False: nothing here is compiled).
Import this module before diffusers.

A second venv ($VFLOW_REF35_PY, /opt/vflow-ref35) holds diffusers 0.35.2 for the
image-to-video model (WanTransformer3DModel(image_dim=…)); use_diffusers_035() re-runs a
script there and adds the torch.nn.RMSNorm it builds its attention norms from.
"""
import math
import os
import sys
import types

import torch
import torch.nn.functional as F

if not hasattr(F, "scaled_dot_product_attention"):
    def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        q, k, v = query, key, value
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
    torch.compiler = types.SimpleNamespace(disable=_disable, is_compiling=lambda: False)


def perturb(model, seed=1):
    """Moves every parameter off its init (norm gains start at exactly 1 and biases at 0,
    which would hide a missing gain or bias): p·(1 + 0.3·n) + 0.05·n', n from seed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def rel_max(a, ref):
    """max |a − ref| over max |ref| (numpy arrays)."""
    import numpy as np
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


class Checks:
    """Counts failed checks: check(cond, msg) prints "FAIL: msg" when cond is false and
    returns cond; failed is the count, verdict() prints PASS/FAIL and gives the exit code."""

    def __init__(self):
        self.failed = 0

    def check(self, cond, msg):
        if not cond:
            self.failed += 1
            print("FAIL: " + msg)
        return cond

    def verdict(self):
        print("PASS" if not self.failed else "FAIL (%d)" % self.failed)
        return 1 if self.failed else 0


def rel_norm(a, ref):
    """||a − ref|| / ||ref|| (numpy arrays)."""
    import numpy as np
    return float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-30))


def grad_errors(layout, grads, ref_grads):
    """Per tensor of layout ((name, offset, numel, shape) rows) the relative error
    rel_norm of the flat gradient vector's slice against ref_grads[name], in f64, and
    whether the reference is zero: [(name, error, zero)]."""
    import numpy as np
    out = []
    for name, off, numel, _ in layout:
        ref = ref_grads[name].astype(np.float64)
        out.append((name, rel_norm(grads[off:off + numel].astype(np.float64), ref), not np.linalg.norm(ref) > 0))
    return out


def require():
    """Exit 77 (ctest skip) when the reference packages are not importable."""
    try:
        import diffusers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: Wan reference packages missing ({e}); run scripts/setup.sh", file=sys.stderr)
        sys.exit(77)


def reexec_in_ref_venv(env="VFLOW_REF_PY", default="/opt/vflow-ref/bin/python", version=None):
    """Run this script again under $env when the current python lacks diffusers (of
    `version`, when given)."""
    try:
        import diffusers  # noqa: F401
        if version is None or diffusers.__version__ == version:
            return
    except ImportError:
        pass
    py = os.environ.get(env, default)
    # A venv's python is a symlink to the system one: compare prefixes, not real paths.
    venv = os.path.dirname(os.path.dirname(os.path.abspath(py)))
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(venv) \
            and not os.environ.get("VFLOW_REF_REEXEC"):
        os.environ["VFLOW_REF_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)
    require()
    import diffusers  # noqa: F811
    if version is not None and diffusers.__version__ != version:
        print("SKIP: diffusers %s here, %s wanted ($%s); run scripts/setup.sh" % (diffusers.__version__, version, env),
              file=sys.stderr)
        sys.exit(77)


class _RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm of torch 2.4: x·rsqrt(mean(x²) + eps)·weight over the last dims, eps
    by default the dtype's machine epsilon."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        dims = tuple(range(-len(self.normalized_shape), 0))
        y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
        return y * self.weight if self.weight is not None else y


def use_diffusers_035():
    """Re-runs the script under $VFLOW_REF35_PY (diffusers 0.35.2) unless it is there, and
    gives torch 1.13 the torch.nn.RMSNorm diffusers 0.35 builds on. Before importing
    diffusers."""
    reexec_in_ref_venv("VFLOW_REF35_PY", "/opt/vflow-ref35/bin/python", "0.35.2")
    if not hasattr(torch.nn, "RMSNorm"):
        torch.nn.RMSNorm = _RMSNorm

"""lpattn from Python: low-precision attention kernels as differentiable PyTorch ops.

    import torch, lpattn
    o = lpattn.attention(q, k, v, causal=True)                 # [B, H, T, D], like SDPA
    o = lpattn.kinterval_attention(q, k, v, options="K=8,ste=weight")
    y = lpattn.threshold_attention(q1, k1, v, q2=q2, k2=k2, lam=lam)
    v_gated = lpattn.value_gate(v, alpha=alpha, beta=beta)
    print(lpattn.info())

docs/python.md is the guide; docs/math.md the math of each kernel.
"""

from .functional import (attention, default_scale, kinterval_attention, threshold_attention,
                         value_gate)
from .info import Info, info
from ._threads import get_num_threads, set_num_threads
from ._lpattn import alibi_slopes

__version__ = info().version

__all__ = [
    "attention", "kinterval_attention", "threshold_attention", "value_gate", "default_scale",
    "alibi_slopes", "info", "Info", "get_num_threads", "set_num_threads",
]

"""lpattn's kernels as differentiable PyTorch ops (docs/python.md §1).

Each op is a torch.autograd.Function whose forward and backward call lpattn's own
kernels (docs/math.md), with gradients for every tensor and parameter the kernel
has. Shapes follow PyTorch: [B, H, T, D] (layout="bhtd", the default, as in
torch.nn.functional.scaled_dot_product_attention) or [B, T, H, D] (layout="bthd");
K and V may have fewer heads than Q (grouped-query attention, by shape).
"""

import math

import torch

from . import _lpattn
from ._tensors import (check_layout, check_operand, check_parameter, dtypes, fp32, narrow,
                       numpy_in_numpy_out, view)
from ._threads import get_num_threads


def _heads(t, layout):
    return t.size(1 if layout == "bhtd" else 2)


def _tokens(t, layout):
    return t.size(2 if layout == "bhtd" else 1)


def _config(layout, causal, scale, precision, **fields):
    check_layout(layout)
    config = _lpattn.Config()
    config.layout = layout
    config.causal = bool(causal)
    if scale is not None:
        config.scale = float(scale)
    config.precision = precision or ""
    config.threads = get_num_threads()
    for name, value in fields.items():
        setattr(config, name, value)
    return config


def _empty_like_fp32(t):
    return torch.empty(t.shape, dtype=torch.float32)


def _row_stats(q, layout, dtype=torch.float32):
    """A dense [B, H, Tq] array per row of the query."""
    return torch.empty((q.size(0), _heads(q, layout), _tokens(q, layout)), dtype=dtype)


# ---- exact softmax attention, sinks, off-by-one, softcap, ALiBi, sliding window (§1) -----

class _ExactAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, config, q, k, v, sink_logits, alibi):
        q32, k32, v32, sink32 = fp32(q), fp32(k), fp32(v), fp32(sink_logits)
        o = _empty_like_fp32(q32)
        lse = _row_stats(q32, config.layout)
        _lpattn.exact_forward(config, view(q32), view(k32), view(v32), view(o), view(lse),
                              view(sink32), view(alibi))
        ctx.config = config
        ctx.dtypes = dtypes(q, k, v, sink_logits)
        ctx.save_for_backward(q32, k32, v32, o, lse, sink32, alibi)
        ctx.mark_non_differentiable(lse)
        return narrow(o, q.dtype), lse

    @staticmethod
    def backward(ctx, d_o, _d_lse):
        q32, k32, v32, o, lse, sink32, alibi = ctx.saved_tensors
        dq, dk, dv = _empty_like_fp32(q32), _empty_like_fp32(k32), _empty_like_fp32(v32)
        d_sink = None if sink32 is None else torch.empty_like(sink32)
        _lpattn.exact_backward(ctx.config, view(q32), view(k32), view(v32), view(o),
                               view(fp32(d_o)), view(lse), view(dq), view(dk), view(dv),
                               view(sink32), view(d_sink), view(alibi))
        q_dtype, k_dtype, v_dtype, sink_dtype = ctx.dtypes
        return (None, narrow(dq, q_dtype), narrow(dk, k_dtype), narrow(dv, v_dtype),
                narrow(d_sink, sink_dtype), None)


@numpy_in_numpy_out
def attention(q, k, v, *, causal=False, scale=None, sink=None, precision=None, softcap=0.0,
              alibi=None, window=0, layout="bhtd", return_lse=False):
    """Softmax attention softmax(scale Q K^T + bias) V (docs/math.md §1).

    causal:    bottom-right aligned (key j visible to query i iff j <= i + Tk - Tq).
    scale:     score scale; None is 1 / sqrt(D).
    sink:      None; "off_by_one" (a sink logit fixed at 0); or a [H] tensor of learned
               sink logits, which gets a gradient (§1.1).
    precision: lpattn's precision option, e.g. "qk=int8:pv=int8" or "qk=bf16:pv=bf16:p=bf16"
               (docs/math.md §4); None is fp32.
    softcap:   c > 0 caps each score at c tanh(s / c) (§1.3); 0 is off.
    alibi:     None; True for the ALiBi paper's slopes; or a [H] tensor of slopes (§1.4, fixed:
               no gradient).
    window:    a sliding window of this many keys (§1.5); 0 is none.
    return_lse: also return lse = m + log Z per row, [B, H, Tq] (no gradient).
    """
    check_layout(layout)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_operand(t, name, layout)
    heads = _heads(q, layout)
    sink_mode, sink_logits = "none", None
    if isinstance(sink, str):
        if sink != "off_by_one":
            raise ValueError(f"sink must be None, 'off_by_one' or a [heads] tensor of sink "
                             f"logits, got {sink!r}")
        sink_mode = "off_by_one"
    elif sink is not None:
        check_parameter(sink, "sink", [heads])
        sink_mode, sink_logits = "learned", sink
    if alibi is True:
        alibi = torch.tensor(_lpattn.alibi_slopes(heads), dtype=torch.float32)
    elif alibi is False:
        alibi = None
    elif alibi is not None:
        check_parameter(alibi, "alibi", [heads])
        alibi = fp32(alibi)
    config = _config(layout, causal, scale, precision, sink=sink_mode, softcap=float(softcap),
                     window=int(window))
    o, lse = _ExactAttention.apply(config, q, k, v, sink_logits, alibi)
    return (o, lse) if return_lse else o


# ---- K-interval attention (§2) -------------------------------------------------------------

class _KIntervalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, config, q, k, v):
        q32, k32, v32 = fp32(q), fp32(k), fp32(v)
        o = _empty_like_fp32(q32)
        saved = tuple(_row_stats(q32, config.layout) for _ in range(4)) + tuple(
            _row_stats(q32, config.layout, torch.int32) for _ in range(2))
        _lpattn.kinterval_forward(config, view(q32), view(k32), view(v32), view(o),
                                  tuple(view(t) for t in saved))
        ctx.config = config
        ctx.dtypes = dtypes(q, k, v)
        ctx.save_for_backward(q32, k32, v32, o, *saved)
        return narrow(o, q.dtype)

    @staticmethod
    def backward(ctx, d_o):
        q32, k32, v32, o, *saved = ctx.saved_tensors
        dq, dk, dv = _empty_like_fp32(q32), _empty_like_fp32(k32), _empty_like_fp32(v32)
        _lpattn.kinterval_backward(ctx.config, view(q32), view(k32), view(v32), view(o),
                                   view(fp32(d_o)), tuple(view(t) for t in saved), view(dq),
                                   view(dk), view(dv))
        q_dtype, k_dtype, v_dtype = ctx.dtypes
        return None, narrow(dq, q_dtype), narrow(dk, k_dtype), narrow(dv, v_dtype)


@numpy_in_numpy_out
def kinterval_attention(q, k, v, *, options="", causal=False, scale=None, precision=None,
                        layout="bhtd"):
    """K-interval attention (docs/math.md §2): exp replaced by K + 1 grid values per row.

    options: "K=4,cal=minmax|window,W=8,round=lerp|nearest,ste=exact|weight|prob,
    slope=exp|grid,jac=pi|grid,detach=0|1,grid=FORMAT" (every item optional); `ste` picks the
    straight-through rule the backward uses.
    """
    check_layout(layout)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_operand(t, name, layout)
    config = _config(layout, causal, scale, precision,
                     kinterval=_lpattn.kinterval_options(options))
    return _KIntervalAttention.apply(config, q, k, v)


# ---- thresholded (differential) attention (§3) ---------------------------------------------

def _option_keys(text):
    return {item.split("=", 1)[0].strip() for item in text.replace(":", ",").split(",")
            if item.strip()}


class _ThresholdAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, config, want_survivors, q1, k1, v, q2, k2, lam, beta):
        # beta's value is in config.threshold; the tensor is here for its gradient.
        ctx.beta = None if beta is None else (beta.shape, beta.dtype)
        views = 2 if q2 is not None else 1
        args = [fp32(t) for t in (q1, k1, q2, k2, v, lam)]
        o = _empty_like_fp32(args[0])
        survivors = None
        if want_survivors:
            survivors = torch.empty((views, *_row_stats(args[0], config.layout).shape),
                                    dtype=torch.int32)
        _lpattn.threshold_forward(config, *(view(t) for t in args), view(o), view(survivors))
        ctx.config = config
        ctx.dtypes = dtypes(q1, k1, v, q2, k2, lam)
        ctx.save_for_backward(*args)
        if survivors is None:
            return narrow(o, q1.dtype), None
        ctx.mark_non_differentiable(survivors)
        return narrow(o, q1.dtype), survivors

    @staticmethod
    def backward(ctx, d_o, _d_survivors):
        q1, k1, q2, k2, v, lam = ctx.saved_tensors
        two = q2 is not None
        dq1, dk1, dv = _empty_like_fp32(q1), _empty_like_fp32(k1), _empty_like_fp32(v)
        dq2 = _empty_like_fp32(q2) if two else None
        dk2 = _empty_like_fp32(k2) if two else None
        d_lambda = torch.empty_like(lam) if two else None
        d_beta = torch.empty(1, dtype=torch.float32)
        _lpattn.threshold_backward(ctx.config, view(q1), view(k1), view(q2), view(k2), view(v),
                                   view(lam), view(fp32(d_o)), view(dq1), view(dk1), view(dq2),
                                   view(dk2), view(dv), view(d_lambda), view(d_beta))
        q1_dtype, k1_dtype, v_dtype, q2_dtype, k2_dtype, lam_dtype = ctx.dtypes
        return (None, None, narrow(dq1, q1_dtype), narrow(dk1, k1_dtype), narrow(dv, v_dtype),
                narrow(dq2, q2_dtype), narrow(dk2, k2_dtype), narrow(d_lambda, lam_dtype),
                None if ctx.beta is None else narrow(d_beta.reshape(ctx.beta[0]), ctx.beta[1]))


@numpy_in_numpy_out
def threshold_attention(q1, k1, v, *, q2=None, k2=None, lam=None, beta=None, options="",
                        causal=False, scale=None, precision=None, layout="bhtd",
                        return_survivors=False):
    """Thresholded (differential) attention (docs/math.md §3): y = sum_j (a1 - lam a2) v_j with
    a = max(s - tau, 0)^p, s the cosine of q and k (times scale, default 1) and
    tau = beta sqrt(2 ln(N / kappa) / D).

    Two views (q2, k2 and lam, [H] lambda parameters clamped to [0, 1]) or one (q1, k1 only).
    options: "views=1|2,p=1|2|3,beta=1,kappa=1,l2=0|1"; views defaults to 2 when q2 is given,
    else 1. beta: None (from options), a float, or a 0-d tensor that gets a gradient.
    return_survivors: also return each row's nonzero weights per view, [views, B, H, Tq].
    """
    check_layout(layout)
    named = [("q1", q1), ("k1", k1), ("v", v)]
    if q2 is not None or k2 is not None:
        named += [("q2", q2), ("k2", k2)]
    for name, t in named:
        check_operand(t, name, layout)
    keys = _option_keys(options)
    views = 2 if q2 is not None else 1
    extra = [] if "views" in keys else [f"views={views}"]
    if lam is not None:
        check_parameter(lam, "lam", [_heads(q1, layout)])
    if isinstance(beta, torch.Tensor):
        if beta.numel() != 1:
            raise ValueError(f"beta must be a float or a one-element tensor, got shape "
                             f"{list(beta.shape)}")
        extra.append(f"beta={float(beta.detach()):.9g}")
    elif beta is not None:
        extra.append(f"beta={float(beta):.9g}")
        beta = None
    text = ",".join(item for item in [options] + extra if item)
    config = _config(layout, causal, scale, precision,
                     threshold=_lpattn.threshold_options(text))
    o, survivors = _ThresholdAttention.apply(config, bool(return_survivors), q1, k1, v, q2, k2,
                                             lam, beta)
    return (o, survivors) if return_survivors else o


# ---- value gates (§1.2) ----------------------------------------------------------------------

class _ValueGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layout, threads, kind, want_gates, v, first, second):
        v32, first32, second32 = fp32(v), fp32(first), fp32(second)
        out = _empty_like_fp32(v32)
        gates = _row_stats(v32, layout) if want_gates else None
        _lpattn.value_gate_forward(layout, threads, kind, view(v32), view(first32),
                                   view(second32), view(out), view(gates))
        ctx.args = (layout, threads, kind)
        ctx.dtypes = dtypes(v, first, second)
        ctx.save_for_backward(v32, first32, second32)
        if gates is not None:
            ctx.mark_non_differentiable(gates)
        return narrow(out, v.dtype), gates

    @staticmethod
    def backward(ctx, d_out, _d_gates):
        v32, first32, second32 = ctx.saved_tensors
        dv = _empty_like_fp32(v32)
        d_first, d_second = torch.empty_like(first32), torch.empty_like(second32)
        _lpattn.value_gate_backward(*ctx.args, view(v32), view(first32), view(second32),
                                    view(fp32(d_out)), view(dv), view(d_first), view(d_second))
        v_dtype, first_dtype, second_dtype = ctx.dtypes
        return (None, None, None, None, narrow(dv, v_dtype), narrow(d_first, first_dtype),
                narrow(d_second, second_dtype))


@numpy_in_numpy_out
def value_gate(v, *, alpha=None, beta=None, w=None, b=None, layout="bhtd",
               return_gates=False):
    """A value gate (docs/math.md §1.2): v~_j = g_j v_j with a gate computed from v_j alone.

    Norm gate: alpha, beta ([Hkv]): g = sigmoid(alpha ||v_j|| + beta).
    Projection gate: w ([Hkv, D]) and b ([Hkv]): g = sigmoid(w . v_j + b).
    return_gates: also return g, [B, Hkv, Tk] (no gradient).
    """
    check_layout(layout)
    check_operand(v, "v", layout)
    heads, dim = _heads(v, layout), v.size(-1)
    if alpha is not None or beta is not None:
        if w is not None or b is not None:
            raise ValueError("pass alpha and beta (norm gate) or w and b (projection gate), "
                             "not both")
        if alpha is None or beta is None:
            raise ValueError("the norm gate needs both alpha and beta ([kv_heads] each)")
        kind, first, second = "norm", alpha, beta
        check_parameter(alpha, "alpha", [heads])
        check_parameter(beta, "beta", [heads])
    elif w is not None and b is not None:
        kind, first, second = "projection", w, b
        check_parameter(w, "w", [heads, dim])
        check_parameter(b, "b", [heads])
    else:
        raise ValueError("value_gate needs alpha and beta (norm gate) or w and b "
                         "(projection gate)")
    out, gates = _ValueGate.apply(layout, get_num_threads(), kind, bool(return_gates), v, first,
                                  second)
    return (out, gates) if return_gates else out


def default_scale(head_dim):
    """The softmax kernels' default score scale, 1 / sqrt(head_dim)."""
    return 1.0 / math.sqrt(head_dim)

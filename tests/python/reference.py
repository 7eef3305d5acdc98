"""The kernels' math written out in plain PyTorch, in float64 (docs/math.md §1-§3), so that
torch's own autograd gives the reference gradients. Tensors are [B, H, T, D]."""

import math

import torch


def expand_kv(t, heads):
    """K or V's kv heads repeated for the query heads that read them (GQA)."""
    return t.repeat_interleave(heads // t.size(1), dim=1)


def visible_mask(q_len, kv_len, causal, window=0):
    """[Tq, Tk]: key j visible to query i (bottom-right causal alignment, §1, §1.5)."""
    i = torch.arange(q_len).unsqueeze(1) + (kv_len - q_len)
    j = torch.arange(kv_len).unsqueeze(0)
    mask = torch.ones(q_len, kv_len, dtype=torch.bool)
    if causal:
        mask &= j <= i
    if window:
        mask &= j > i - window
    return mask


def exact_attention(q, k, v, causal=False, scale=None, sink=None, softcap=0.0, alibi=None,
                    window=0):
    """§1: softmax(scale Q K^T - ALiBi, capped) V over the visible keys; sink is None,
    "off_by_one" or [H] logits (an extra column that takes mass and has no value)."""
    heads, q_len, kv_len, dim = q.size(1), q.size(2), k.size(2), q.size(3)
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    s = scale * q @ expand_kv(k, heads).transpose(-1, -2)
    if alibi is not None:
        i = torch.arange(q_len).unsqueeze(1) + (kv_len - q_len)
        distance = (i - torch.arange(kv_len).unsqueeze(0)).abs().to(s.dtype)
        s = s - alibi.view(1, heads, 1, 1) * distance
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~visible_mask(q_len, kv_len, causal, window), float("-inf"))
    if sink is not None:
        logits = torch.zeros(heads, dtype=s.dtype) if isinstance(sink, str) else sink
        column = logits.view(1, heads, 1, 1).expand(s.size(0), heads, q_len, 1)
        p = torch.softmax(torch.cat([s, column], dim=-1), dim=-1)[..., :kv_len]
    else:
        p = torch.softmax(s, dim=-1)
    return p @ expand_kv(v, heads)


def _options(text, defaults):
    options = dict(defaults)
    for item in text.replace(":", ",").split(","):
        if item.strip():
            key, value = item.split("=", 1)
            options[key.strip()] = value.strip()
    return options


def kinterval_attention(q, k, v, options="", causal=False, scale=None):
    """§2 with lerp or nearest reconstruction; the surrogates as straight-through rules (§2.5
    exact: autograd of the chord itself; §2.7 weight; §2.8 prob), detach as m, a constants."""
    o = _options(options, {"K": "4", "cal": "minmax", "W": "8", "round": "lerp",
                           "ste": "exact", "detach": "0"})
    K, detach = int(o["K"]), o["detach"] == "1"
    heads, q_len, kv_len, dim = q.size(1), q.size(2), k.size(2), q.size(3)
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    s = scale * q @ expand_kv(k, heads).transpose(-1, -2)
    visible = visible_mask(q_len, kv_len, causal)
    m = s.masked_fill(~visible, float("-inf")).amax(-1, keepdim=True)
    a = s.masked_fill(~visible, float("inf")).amin(-1, keepdim=True)
    if detach:
        m, a = m.detach(), a.detach()
    R = (m - a) if o["cal"] == "minmax" else torch.full_like(m, float(o["W"]))
    h = R / K
    u = (s - m).masked_fill(~visible, 0.0)
    x = ((u + R) / h).clamp(0, K)
    if o["round"] == "lerp":
        k_index = x.detach().floor().clamp(max=K - 1)
        theta = x - k_index
        w_hat = (1 - theta) * torch.exp(k_index * h - R) + theta * torch.exp((k_index + 1) * h - R)
    else:
        r = (x.detach() + 0.5).floor().clamp(max=K)
        w_hat = torch.exp(r * h - R)
    w_hat = w_hat.masked_fill(~visible | (u < -R), 0.0)
    if o["ste"] == "weight":
        e = torch.exp(u).masked_fill(~visible, 0.0)
        w_hat = w_hat.detach() + e - e.detach()
    p_hat = w_hat / w_hat.sum(-1, keepdim=True)
    if o["ste"] == "prob":
        pi = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
        p_hat = p_hat.detach() + pi - pi.detach()
    return p_hat @ expand_kv(v, heads)


def threshold_attention(q1, k1, v, q2=None, k2=None, lam=None, beta=1.0, kappa=1.0, power=2,
                        l2=True, causal=False, scale=1.0):
    """§3.1: y = sum_j (a1 - clamp(lam) a2) v_j, a = max(s - tau, 0)^p on cosine scores."""
    heads, q_len, kv_len, dim = q1.size(1), q1.size(2), k1.size(2), q1.size(3)
    visible = visible_mask(q_len, kv_len, causal)
    n = visible.sum(-1, keepdim=True).to(q1.dtype)
    tau = beta * torch.sqrt(2 * torch.log(n / kappa).clamp(min=0) / dim)

    def weights(q, k):
        if l2:
            q = q / q.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            k = k / k.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        s = scale * q @ expand_kv(k, heads).transpose(-1, -2)
        return ((s - tau).clamp(min=0) ** power).masked_fill(~visible, 0.0)

    a = weights(q1, k1)
    if q2 is not None:
        a = a - lam.clamp(0, 1).view(1, heads, 1, 1) * weights(q2, k2)
    return a @ expand_kv(v, heads)


def value_gate(v, alpha=None, beta=None, w=None, b=None):
    """§1.2: v_j scaled by sigmoid(alpha ||v_j|| + beta) or sigmoid(w . v_j + b) per kv head."""
    heads = v.size(1)
    if alpha is not None:
        z = alpha.view(1, heads, 1) * v.norm(dim=-1) + beta.view(1, heads, 1)
    else:
        z = torch.einsum("bhtd,hd->bht", v, w) + b.view(1, heads, 1)
    return torch.sigmoid(z).unsqueeze(-1) * v


def to_layout(t, layout):
    """A [B, H, T, D] tensor as the layout's tensor (contiguous in it)."""
    return t if layout == "bhtd" else t.transpose(1, 2).contiguous()


def from_layout(t, layout):
    """The layout's tensor viewed as [B, H, T, D]."""
    return t if layout == "bhtd" else t.transpose(1, 2)

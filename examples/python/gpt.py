"""A nanoGPT-style byte-level GPT in PyTorch whose attention is chosen by name: PyTorch's own
(written out) or one of lpattn's kernels. examples/python/train_gpt.py trains it on the Brown
corpus; tests/python/test_training.py trains a two-layer one on generated text.

    model = GPT(GPTConfig(layers=2, width=64, heads=4, context=64, attention="exact"))
"""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import lpattn

# Attention names: "torch" (softmax attention written out in PyTorch), and lpattn's "exact",
# "sink" (a learned sink logit per head), "offbyone", "kint" (K-interval, GPTConfig.kint),
# "tda" (thresholded differential attention, two views) and "int8" / "bf16" (exact attention
# with those operands).
ATTENTIONS = ("torch", "exact", "sink", "offbyone", "kint", "tda", "int8", "bf16")
PRECISIONS = {"int8": "qk=int8:pv=int8", "bf16": "qk=bf16:pv=bf16:p=bf16"}


@dataclasses.dataclass
class GPTConfig:
    layers: int = 4
    width: int = 128
    heads: int = 4
    context: int = 128
    vocab: int = 256  # bytes
    attention: str = "exact"
    kint: str = "K=8,ste=weight"  # K-interval options (docs/math.md §2.1)
    precision: str = ""  # any lpattn precision option, for the lpattn arms


def torch_attention(q, k, v):
    """Causal softmax attention written out in PyTorch ops, [B, H, T, D]."""
    T = q.size(2)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, "
                             f"got {config.attention!r}")
        self.config = config
        self.head_dim = config.width // config.heads
        views = 2 if config.attention == "tda" else 1
        # q and k per view, then v.
        self.qkv = nn.Linear(config.width, (2 * views + 1) * config.width, bias=False)
        self.proj = nn.Linear(config.width, config.width, bias=False)
        if config.attention == "sink":
            self.sink = nn.Parameter(torch.zeros(config.heads))
        if config.attention == "tda":
            self.lam = nn.Parameter(torch.full((config.heads,), 0.5))

    def forward(self, x):
        B, T, C = x.shape
        heads, name = self.config.heads, self.config.attention
        # [B, T, H, D] views of the projection: lpattn reads them in place (layout="bthd").
        parts = [p.view(B, T, heads, self.head_dim) for p in self.qkv(x).split(C, dim=2)]
        precision = self.config.precision or PRECISIONS.get(name)
        if name == "torch":
            q, k, v = (p.transpose(1, 2) for p in parts)
            y = torch_attention(q, k, v).transpose(1, 2)
        elif name in ("exact", "int8", "bf16", "sink", "offbyone"):
            sink = {"sink": getattr(self, "sink", None), "offbyone": "off_by_one"}.get(name)
            y = lpattn.attention(*parts, causal=True, sink=sink, precision=precision,
                                 layout="bthd")
        elif name == "kint":
            y = lpattn.kinterval_attention(*parts, options=self.config.kint, causal=True,
                                           precision=precision, layout="bthd")
        else:  # tda: y = sum (a1 - lam a2) v, then a per-head RMS norm (no softmax scale)
            q1, k1, q2, k2, v = parts
            y = lpattn.threshold_attention(q1, k1, v, q2=q2, k2=k2, lam=self.lam, causal=True,
                                           layout="bthd")
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.proj(y.reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.width)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(),
                                 nn.Linear(4 * config.width, config.width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.token = nn.Embedding(config.vocab, config.width)
        self.position = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln = nn.LayerNorm(config.width)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens, targets=None):
        T = tokens.size(1)
        x = self.token(tokens) + self.position(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.ln(x) @ self.token.weight.t()  # tied output embedding
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def batches(data, batch, context, generator):
    """Random windows of a uint8 tensor: inputs and next-byte targets, [batch, context]."""
    starts = torch.randint(len(data) - context - 1, (batch,), generator=generator)
    rows = torch.stack([data[s:s + context + 1] for s in starts.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]

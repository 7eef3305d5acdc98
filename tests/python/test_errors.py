"""What lpattn refuses, and how (docs/python.md §2): every refusal is a ValueError whose message
says what is wrong and, for tensors, what to pass instead; lpattn's own checks come through
with their messages."""

import numpy as np
import pytest
import torch

import lpattn


def qkv(H=4, Hkv=2, T=5, D=8, **kwargs):
    return (torch.randn(2, H, T, D, **kwargs), torch.randn(2, Hkv, T, D, **kwargs),
            torch.randn(2, Hkv, T, D, **kwargs))


def refused(pattern, call):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_tensor_on_another_device():
    q, k, v = qkv()
    refused(r"q is on meta; .* pass q\.cpu\(\)",
            lambda: lpattn.attention(torch.empty(2, 4, 5, 8, device="meta"), k, v))


def test_dtypes_the_kernels_do_not_take():
    q, k, v = qkv()
    refused(r"k has dtype torch.float64; .* pass k\.float\(\)",
            lambda: lpattn.attention(q, k.double(), v))
    refused(r"v has dtype torch.int32",
            lambda: lpattn.value_gate(v.int(), alpha=torch.ones(2), beta=torch.ones(2)))
    refused(r"q has dtype torch.float64",  # numpy float64 arrays too
            lambda: lpattn.attention(q.double().numpy(), k.numpy(), v.numpy()))


def test_non_contiguous_head_dimension():
    q, k, v = qkv()
    q_t = torch.randn(2, 4, 8, 5).transpose(2, 3)
    refused(r"q's head dimension .* must be contiguous, got stride 5; pass q\.contiguous\(\)",
            lambda: lpattn.attention(q_t, k, v))


def test_shapes():
    q, k, v = qkv(H=3, Hkv=2)
    refused(r"heads .*multiple of kv_heads|kv_heads", lambda: lpattn.attention(q, k, v))
    q, k, v = qkv()
    refused(r"must be \[B, H, T, D\]", lambda: lpattn.attention(q[0], k, v))
    refused(r"v must have shape \[2, 2, 5, 8\], got \[2, 2, 4, 8\]",
            lambda: lpattn.attention(q, k, v[:, :, :4]))
    refused(r"k must have q's batch", lambda: lpattn.attention(q, k[:1], v[:1]))
    refused(r"layout must be 'bhtd'", lambda: lpattn.attention(q, k, v, layout="bhdt"))
    refused(r"sink must have shape \[4\]",
            lambda: lpattn.attention(q, k, v, sink=torch.zeros(2)))


def test_options_and_arguments_checked_by_lpattn():
    q, k, v = qkv()
    refused(r"scale", lambda: lpattn.attention(q, k, v, scale=float("nan")))
    refused(r"K", lambda: lpattn.kinterval_attention(q, k, v, options="K=0"))
    refused(r"nearest", lambda: lpattn.kinterval_attention(q, k, v,
                                                           options="round=nearest,ste=exact"))
    refused(r"unknown|colour", lambda: lpattn.kinterval_attention(q, k, v, options="colour=1"))
    refused(r"qk", lambda: lpattn.attention(q, k, v, precision="qk=int3"))
    refused(r"sink must be None, 'off_by_one'",
            lambda: lpattn.attention(q, k, v, sink="learned"))
    refused(r"softcap", lambda: lpattn.attention(q, k, v, softcap=-1.0))


def test_threshold_views_and_parameters():
    q, k, v = qkv()
    refused(r"views=2 needs q2, k2 .* and lam",
            lambda: lpattn.threshold_attention(q, k, v, q2=q, k2=k))
    refused(r"views=1 takes none of them",
            lambda: lpattn.threshold_attention(q, k, v, lam=torch.zeros(4)))
    refused(r"beta must be a float or a one-element tensor",
            lambda: lpattn.threshold_attention(q, k, v, beta=torch.ones(2)))
    refused(r"beta", lambda: lpattn.threshold_attention(q, k, v, beta=-1.0))
    refused(r"p", lambda: lpattn.threshold_attention(q, k, v, options="p=4"))


def test_value_gate_parameters():
    _, _, v = qkv()
    refused(r"alpha and beta .* or w and b", lambda: lpattn.value_gate(v))
    refused(r"not both", lambda: lpattn.value_gate(v, alpha=torch.ones(2), beta=torch.ones(2),
                                                    w=torch.ones(2, 8), b=torch.ones(2)))
    refused(r"w must have shape \[2, 8\]",
            lambda: lpattn.value_gate(v, w=torch.ones(2, 4), b=torch.ones(2)))
    refused(r"finite|alpha",
            lambda: lpattn.value_gate(v, alpha=torch.full((2,), float("inf")),
                                      beta=torch.ones(2)))


def test_numpy_inputs_are_not_modified():
    q, k, v = (t.numpy() for t in qkv())
    copies = [a.copy() for a in (q, k, v)]
    lpattn.attention(q, k, v, causal=True)
    for a, b in zip((q, k, v), copies):
        assert np.array_equal(a, b)

"""lpattn.threshold_attention against thresholded (differential) attention written out in
float64 PyTorch (docs/python.md §4): one and two views, p, kappa, causal, GQA, both layouts,
and the gradients of q, k, v, lambda and a learnable beta."""

import pytest
import torch

import lpattn
import reference
from compare import compare, random_inputs, strided_view

B, H, HKV, TQ, TK, D = 2, 4, 2, 7, 12, 8


def inputs_for(seed, views, **extra):
    shapes = dict(q1=(B, H, TQ, D), k1=(B, HKV, TK, D), v=(B, HKV, TK, D))
    if views == 2:
        shapes.update(q2=(B, H, TQ, D), k2=(B, HKV, TK, D))
    shapes.update(extra)
    return random_inputs(seed, **shapes)


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
@pytest.mark.parametrize("options", ["p=2", "p=1,kappa=0.5", "p=3,beta=0.5", "p=2,l2=0"])
def test_two_views_match_reference(options, layout):
    inputs = inputs_for(21, 2, lam=(H,))
    inputs["lam"] = 0.2 + 0.6 * torch.rand(H, dtype=torch.float64,
                                           generator=torch.Generator().manual_seed(1))
    fields = dict(item.split("=") for item in options.split(","))
    ref = dict(power=int(fields.get("p", 2)), kappa=float(fields.get("kappa", 1)),
               beta=float(fields.get("beta", 1)), l2=fields.get("l2", "1") == "1")
    scale = 0.4 if not ref["l2"] else 1.0
    compare(lambda **t: lpattn.threshold_attention(**t, options=options, causal=True,
                                                   scale=scale, layout=layout),
            lambda **t: reference.threshold_attention(**t, causal=True, scale=scale, **ref),
            inputs, layout)


@pytest.mark.parametrize("causal", [False, True])
def test_one_view_and_learnable_beta(causal):
    inputs = inputs_for(22, 1, beta=())
    inputs["beta"] = torch.tensor(0.7, dtype=torch.float64)
    compare(lambda beta, **t: lpattn.threshold_attention(**t, beta=beta, causal=causal),
            lambda beta, **t: reference.threshold_attention(**t, beta=beta, causal=causal),
            inputs)


def test_two_views_strided_with_beta_gradient():
    inputs = inputs_for(23, 2, lam=(H,), beta=())
    inputs["lam"] = torch.full((H,), 0.5, dtype=torch.float64)
    inputs["beta"] = torch.tensor(0.6, dtype=torch.float64)
    compare(lambda beta, **t: lpattn.threshold_attention(**t, beta=beta, causal=True),
            lambda beta, **t: reference.threshold_attention(**t, beta=beta, causal=True),
            inputs, prepare=lambda name, t: strided_view(t, 2) if t.dim() == 4 else t)


def test_survivors_count_the_nonzero_weights():
    inputs = inputs_for(24, 2)
    q1, k1, v, q2, k2 = (inputs[n].float() for n in ("q1", "k1", "v", "q2", "k2"))
    lam = torch.full((H,), 0.5)
    _, survivors = lpattn.threshold_attention(q1, k1, v, q2=q2, k2=k2, lam=lam, causal=True,
                                              return_survivors=True)
    assert survivors.shape == (2, B, H, TQ) and survivors.dtype == torch.int32
    for view, (q, k) in enumerate(((q1, k1), (q2, k2))):
        qn = q / q.norm(dim=-1, keepdim=True)
        kn = reference.expand_kv(k / k.norm(dim=-1, keepdim=True), H)
        s = qn @ kn.transpose(-1, -2)
        visible = reference.visible_mask(TQ, TK, True)
        n = visible.sum(-1, keepdim=True).float()
        tau = torch.sqrt(2 * torch.log(n).clamp(min=0) / D)
        expected = ((s > tau) & visible).sum(-1)
        assert torch.equal(survivors[view].long(), expected)

"""lpattn.kinterval_attention against K-interval attention written out in float64 PyTorch
(docs/python.md §4): the forward for each calibration and rounding, and the backward of each
surrogate as the straight-through rule it is (docs/math.md §2.5-§2.9)."""

import pytest
import torch

import lpattn
import reference
from compare import compare, random_inputs, strided_view

SHAPES = dict(q=(2, 4, 6, 16), k=(2, 2, 11, 16), v=(2, 2, 11, 16))

OPTIONS = [
    "K=4",
    "K=8,cal=window,W=3",
    "K=4,ste=weight",
    "K=4,round=nearest,ste=weight",
    "K=16,ste=weight,detach=1",
    "K=4,detach=1",
    "K=4,ste=prob",
    "K=2,cal=window,W=2,round=nearest,ste=prob",
]


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
@pytest.mark.parametrize("options", OPTIONS)
def test_kinterval_matches_reference(options, layout):
    inputs = random_inputs(11, **SHAPES)
    inputs["q"] *= 2.0  # spread the scores over the grid
    compare(lambda **t: lpattn.kinterval_attention(**t, options=options, causal=True,
                                                   layout=layout),
            lambda **t: reference.kinterval_attention(**t, options=options, causal=True),
            inputs, layout)


def test_kinterval_strided_and_scaled():
    inputs = random_inputs(12, **SHAPES)
    compare(lambda **t: lpattn.kinterval_attention(**t, options="K=6", scale=0.5),
            lambda **t: reference.kinterval_attention(**t, options="K=6", scale=0.5), inputs,
            prepare=lambda name, t: strided_view(t, 2))


def test_large_K_approaches_softmax():
    inputs = random_inputs(13, **SHAPES)
    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    exact = lpattn.attention(q, k, v, causal=True)
    errors = [(lpattn.kinterval_attention(q, k, v, options=f"K={K}", causal=True) - exact)
              .abs().max().item() for K in (2, 8, 64)]
    assert errors[0] > errors[1] > errors[2]


def test_gradcheck_exact_surrogate():
    generator = torch.Generator().manual_seed(14)
    q, k, v = (torch.randn(1, 1, 3, 4, dtype=torch.float64, generator=generator,
                           requires_grad=True) for _ in range(3))

    def op(q, k, v):
        return lpattn.kinterval_attention(q.float(), k.float(), v.float(),
                                          options="K=4").double()

    # The chord is smooth away from the grid's nodes; these scores stay off them.
    assert torch.autograd.gradcheck(op, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-2)

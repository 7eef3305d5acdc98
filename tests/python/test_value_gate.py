"""lpattn.value_gate against the gates written out in float64 PyTorch (docs/python.md §4):
norm and projection gates, gradients of v and every gate parameter, both layouts."""

import pytest
import torch

import lpattn
import reference
from compare import compare, random_inputs, strided_view

V = (2, 3, 10, 16)


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
def test_norm_gate(layout):
    inputs = random_inputs(31, v=V, alpha=(3,), beta=(3,))
    inputs["alpha"] *= 0.2
    compare(lambda **t: lpattn.value_gate(**t, layout=layout), reference.value_gate, inputs,
            layout)


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
def test_projection_gate(layout):
    inputs = random_inputs(32, v=V, w=(3, 16), b=(3,))
    compare(lambda **t: lpattn.value_gate(**t, layout=layout), reference.value_gate, inputs,
            layout)


def test_strided_v_and_returned_gates():
    inputs = random_inputs(33, v=V, alpha=(3,), beta=(3,))
    compare(lpattn.value_gate, reference.value_gate, inputs,
            prepare=lambda name, t: strided_view(t, 2) if name == "v" else t)
    v = inputs["v"].float()
    alpha, beta = inputs["alpha"].float(), inputs["beta"].float()
    out, gates = lpattn.value_gate(v, alpha=alpha, beta=beta, return_gates=True)
    expected = torch.sigmoid(alpha.view(1, 3, 1) * v.norm(dim=-1) + beta.view(1, 3, 1))
    torch.testing.assert_close(gates, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, gates.unsqueeze(-1) * v, rtol=1e-5, atol=1e-6)


def test_gated_values_feed_attention_end_to_end():
    inputs = random_inputs(34, q=(2, 6, 5, 16), k=(2, 3, 10, 16), v=V, alpha=(3,), beta=(3,))
    compare(lambda q, k, v, alpha, beta: lpattn.attention(
                q, k, lpattn.value_gate(v, alpha=alpha, beta=beta), causal=True),
            lambda q, k, v, alpha, beta: reference.exact_attention(
                q, k, reference.value_gate(v, alpha=alpha, beta=beta), causal=True),
            inputs)

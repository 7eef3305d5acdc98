"""lpattn.attention against softmax attention written out in float64 PyTorch (docs/python.md §4):
outputs and every gradient, GQA, Tq != Tk, causal, sinks, masks, both layouts, strided views."""

import pytest
import torch

import lpattn
import reference
from compare import compare, random_inputs, strided_view


def shapes(B=2, H=4, Hkv=2, Tq=5, Tk=9, D=16):
    return dict(q=(B, H, Tq, D), k=(B, Hkv, Tk, D), v=(B, Hkv, Tk, D))


CASES = {
    "gqa_causal_tq_lt_tk": (shapes(), dict(causal=True)),
    "square_noncausal": (shapes(H=3, Hkv=3, Tq=7, Tk=7, D=8), dict()),
    "mha_scale": (shapes(H=2, Hkv=2, Tq=6, Tk=6, D=32), dict(causal=True, scale=0.3)),
    "off_by_one": (shapes(), dict(causal=True, sink="off_by_one")),
    "softcap": (shapes(), dict(causal=True, softcap=1.5, scale=1.0)),
    "alibi": (shapes(), dict(causal=True, alibi=True)),
    "window": (shapes(Tq=9, Tk=12), dict(causal=True, window=4)),
    "long_rows": (shapes(B=1, H=2, Hkv=1, Tq=100, Tk=130, D=24), dict(causal=True)),
}


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_matches_reference(case, layout):
    shape, options = CASES[case]
    inputs = random_inputs(1, **shape)
    ref_options = dict(options)
    if options.get("alibi") is True:
        ref_options["alibi"] = torch.tensor(lpattn.alibi_slopes(shape["q"][1]),
                                            dtype=torch.float64)
    compare(lambda **t: lpattn.attention(**t, layout=layout, **options),
            lambda **t: reference.exact_attention(**t, **ref_options), inputs, layout)


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
def test_learned_sink_gets_its_gradient(layout):
    inputs = random_inputs(2, **shapes(), sink=(4,))
    compare(lambda sink, **t: lpattn.attention(**t, causal=True, sink=sink, layout=layout),
            lambda sink, **t: reference.exact_attention(**t, causal=True, sink=sink),
            inputs, layout)


@pytest.mark.parametrize("axis_name", ["token", "head", "batch"])
def test_strided_views_are_read_in_place(axis_name):
    inputs = random_inputs(3, **shapes())
    axis = {"batch": 0, "head": 1, "token": 2}[axis_name]
    compare(lambda **t: lpattn.attention(**t, causal=True),
            lambda **t: reference.exact_attention(**t, causal=True), inputs,
            prepare=lambda name, t: strided_view(t, axis))


def test_bf16_and_fp16_tensors_come_back_in_their_dtype():
    inputs = random_inputs(4, **shapes())
    for dtype, tolerance in ((torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        q, k, v = (inputs[n].to(dtype).requires_grad_() for n in ("q", "k", "v"))
        o = lpattn.attention(q, k, v, causal=True)
        assert o.dtype == dtype
        expected = reference.exact_attention(q.double(), k.double(), v.double(), causal=True)
        torch.testing.assert_close(o.double(), expected, rtol=tolerance, atol=tolerance)
        o.float().sum().backward()
        assert q.grad.dtype == dtype and k.grad.dtype == dtype and v.grad.dtype == dtype


def test_precision_option_reaches_the_kernel():
    inputs = random_inputs(5, **shapes(Tq=64, Tk=64, D=64))
    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    exact = lpattn.attention(q, k, v, causal=True)
    int8 = lpattn.attention(q, k, v, causal=True, precision="qk=int8:pv=int8")
    difference = (int8 - exact).abs().max().item()
    assert 1e-5 < difference < 5e-2  # rounded, but close
    again = lpattn.attention(q, k, v, causal=True, precision="qk=int8:pv=int8")
    assert torch.equal(again, int8)


def test_lse_is_the_row_log_normaliser():
    inputs = random_inputs(6, **shapes())
    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    _, lse = lpattn.attention(q, k, v, causal=True, return_lse=True)
    s = (inputs["q"] @ reference.expand_kv(inputs["k"], 4).transpose(-1, -2)) / 4.0
    s = s.masked_fill(~reference.visible_mask(5, 9, True), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)
    assert lse.shape == (2, 4, 5) and not lse.requires_grad


def test_gradcheck_small_case():
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64, generator=generator,
                           requires_grad=True) for _ in range(3))
    sink = torch.randn(2, dtype=torch.float64, generator=generator, requires_grad=True)

    def op(q, k, v, sink):  # the kernel is float32: float64 in and out around it
        return lpattn.attention(q.float(), k.float(), v.float(), causal=True,
                                sink=sink.float()).double()

    assert torch.autograd.gradcheck(op, (q, k, v, sink), eps=1e-3, atol=2e-3, rtol=2e-2)


def test_numpy_arrays_in_numpy_arrays_out():
    inputs = random_inputs(8, **shapes())
    q, k, v = (inputs[n].float().numpy() for n in ("q", "k", "v"))
    o = lpattn.attention(q, k, v, causal=True)
    assert type(o).__name__ == "ndarray" and o.dtype.name == "float32"
    expected = reference.exact_attention(inputs["q"], inputs["k"], inputs["v"], causal=True)
    torch.testing.assert_close(torch.from_numpy(o).double(), expected, rtol=2e-4, atol=2e-5)


def test_threads_follow_torch_unless_set():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert lpattn.get_num_threads() == 2 and lpattn.info().threads == 2
        lpattn.set_num_threads(1)
        assert lpattn.get_num_threads() == 1
        lpattn.set_num_threads(0)
        assert lpattn.get_num_threads() == 2
        with pytest.raises(ValueError):
            lpattn.set_num_threads(-1)
    finally:
        lpattn.set_num_threads(0)
        torch.set_num_threads(before)


def test_results_do_not_depend_on_thread_count():
    inputs = random_inputs(9, **shapes(B=2, H=4, Tq=200, Tk=200, D=32))
    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    try:
        lpattn.set_num_threads(1)
        one = lpattn.attention(q, k, v, causal=True)
        lpattn.set_num_threads(2)
        two = lpattn.attention(q, k, v, causal=True)
    finally:
        lpattn.set_num_threads(0)
    assert torch.equal(one, two)

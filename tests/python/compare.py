"""Runs an lpattn op and its float64 reference on the same inputs and compares the outputs and,
through torch.autograd.grad, the gradient of every input."""

import torch

from reference import from_layout, to_layout


def random_inputs(seed, **shapes):
    """float64 tensors of the given shapes, normal(0, 1), from one seed."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
            for name, shape in shapes.items()}


def compare(op, reference, inputs, layout="bhtd", rtol=2e-4, atol=2e-5, prepare=None):
    """op(**fp32 inputs in `layout`) against reference(**float64 [B, H, T, D] inputs).

    4-d inputs go to op in `layout` (prepare(name, tensor) may replace each with a strided
    view of the same values); others as they are. Gradients flow from a random upstream
    gradient. Returns the op's output (as [B, H, T, D]) for further checks."""
    ref_inputs = {name: t.clone().requires_grad_() for name, t in inputs.items()}
    expected = reference(**ref_inputs)
    upstream = torch.randn(expected.shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(99))
    expected_grads = torch.autograd.grad(expected, list(ref_inputs.values()), upstream)

    leaves = {}
    op_inputs = {}
    for name, t in inputs.items():
        leaf = (to_layout(t, layout) if t.dim() == 4 else t).float().requires_grad_()
        leaves[name] = leaf
        op_inputs[name] = prepare(name, leaf) if prepare else leaf
    actual = op(**op_inputs)
    grads = torch.autograd.grad(actual, list(leaves.values()),
                                to_layout(upstream, layout).float())

    torch.testing.assert_close(from_layout(actual, layout).double(), expected.detach(),
                               rtol=rtol, atol=atol, msg=lambda m: f"output: {m}")
    for (name, t), grad, expected_grad in zip(inputs.items(), grads, expected_grads):
        grad = from_layout(grad, layout) if t.dim() == 4 else grad
        torch.testing.assert_close(grad.double(), expected_grad, rtol=rtol * 5, atol=atol * 5,
                                   msg=lambda m, name=name: f"d{name}: {m}")
    return from_layout(actual, layout)


def strided_view(t, axis):
    """The values of `t` as a view that steps over every other element of a larger tensor
    along `axis` (the head dimension stays contiguous); gradients reach `t`."""
    doubled = t.repeat_interleave(2, dim=axis)
    index = [slice(None)] * t.dim()
    index[axis] = slice(None, None, 2)
    return doubled[tuple(index)]

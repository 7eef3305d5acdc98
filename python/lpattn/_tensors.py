"""Torch tensors and numpy arrays as kernel operands (docs/python.md §2).

The kernels read float32 views with any strides and a contiguous head dimension.
A float32 tensor is passed as it is (no copy); bfloat16 and float16 tensors are
widened to float32 (one copy each) and results are narrowed back to the input's
dtype. What cannot be passed is refused with a message saying what to pass.
"""

import functools

import numpy as np
import torch

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_LAYOUTS = {"bhtd": "[B, H, T, D]", "bthd": "[B, T, H, D]"}


def check_layout(layout):
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'bhtd' ([B, H, T, D]) or 'bthd' ([B, T, H, D]), "
                         f"got {layout!r}")


def check_operand(t, name, layout, dims=4):
    """Refuses, with what to pass instead, a tensor the kernels cannot take."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or a numpy array, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} is on {t.device}; lpattn's kernels run on the CPU: "
                         f"pass {name}.cpu()")
    if t.dtype not in _DTYPES:
        raise ValueError(f"{name} has dtype {t.dtype}; lpattn takes float32, bfloat16 or "
                         f"float16: pass {name}.float()")
    if t.dim() != dims:
        shape = _LAYOUTS[layout] if dims == 4 else f"{dims}-d"
        raise ValueError(f"{name} must be {shape} (layout={layout!r}), got shape "
                         f"{list(t.shape)}")
    if dims == 4 and t.size(-1) > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}'s head dimension (the last axis) must be contiguous, got "
                         f"stride {t.stride(-1)}; pass {name}.contiguous()")


def check_parameter(t, name, shape):
    """A parameter tensor (sink logits, lambda, gate weights) of exactly `shape`."""
    check_operand(t, name, "bhtd", dims=len(shape))
    if list(t.shape) != list(shape):
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")


def fp32(t):
    """A float32 tensor the kernels can read: `t` itself when it already is one (detached).

    Expanded views (a zero stride over more than one element) are copied: lpattn
    refuses overlapping strides. A gradient arriving from autograd is often one.
    """
    if t is None:
        return None
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.float()
    if any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.size())) or (
            t.dim() == 4 and t.size(-1) > 1 and t.stride(-1) != 1):
        t = t.contiguous()
    if t.dim() < 4 and not t.is_contiguous():
        t = t.contiguous()
    return t


def view(t):
    """The numpy view of a float32 (or int32) CPU tensor; None stays None."""
    return None if t is None else t.detach().numpy()


def dtypes(*tensors):
    """The dtypes of tensors (None for None): what a backward narrows its gradients to.
    Autograd contexts keep these, not the input tensors themselves."""
    return tuple(None if t is None else t.dtype for t in tensors)


def narrow(t, dtype):
    """`t` in `dtype` (a no-op for float32 and for None)."""
    return t if t is None or dtype is None or t.dtype == dtype else t.to(dtype)


def numpy_in_numpy_out(op):
    """Lets `op` take numpy arrays too: when any argument is one, every tensor result
    comes back as a numpy array (there is no gradient to keep)."""

    def to_torch(x):
        return torch.from_numpy(np.ascontiguousarray(x) if x.strides and min(x.strides) < 0
                                else x) if isinstance(x, np.ndarray) else x

    def to_numpy(x):
        if isinstance(x, tuple):
            return tuple(to_numpy(item) for item in x)
        return x.detach().numpy() if isinstance(x, torch.Tensor) else x

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        given_numpy = any(isinstance(x, np.ndarray) for x in (*args, *kwargs.values()))
        result = op(*(to_torch(x) for x in args), **{k: to_torch(x) for k, x in kwargs.items()})
        return to_numpy(result) if given_numpy else result

    return wrapper

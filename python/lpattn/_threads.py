"""How many threads lpattn's kernels use (docs/python.md §3).

By default a call uses torch.get_num_threads() threads, so lpattn follows
torch.set_num_threads like PyTorch's own operators; set_num_threads(n) overrides
that for lpattn alone, and set_num_threads(0) returns to following torch.
"""

import torch

_override = 0


def set_num_threads(threads: int) -> None:
    """Run lpattn's kernels on `threads` threads (0: follow torch.get_num_threads())."""
    global _override
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"threads must be an int >= 0, got {threads!r}")
    _override = threads


def get_num_threads() -> int:
    """The thread count the next kernel call will use."""
    return _override or max(1, torch.get_num_threads())

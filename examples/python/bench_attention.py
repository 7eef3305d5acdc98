#!/usr/bin/env python3
"""Times one attention call, forward and backward, with lpattn's kernels and with PyTorch's
attention written out (gpt.torch_attention), interleaved, and prints the median of each
(docs/python.md §5).

    PYTHONPATH=build/python python3 examples/python/bench_attention.py --threads 2
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402

import lpattn  # noqa: E402


def arms(heads):
    lam = torch.full((heads,), 0.5, requires_grad=True)
    sink = torch.zeros(heads, requires_grad=True)
    return {
        "torch (written out)": lambda q, k, v, q2, k2: gpt.torch_attention(q, k, v),
        "lpattn exact": lambda q, k, v, q2, k2: lpattn.attention(q, k, v, causal=True),
        "lpattn sink": lambda q, k, v, q2, k2: lpattn.attention(q, k, v, causal=True,
                                                                sink=sink),
        "lpattn int8": lambda q, k, v, q2, k2: lpattn.attention(q, k, v, causal=True,
                                                                precision="qk=int8:pv=int8"),
        "lpattn kint K=8": lambda q, k, v, q2, k2: lpattn.kinterval_attention(
            q, k, v, options="K=8,ste=weight", causal=True),
        "lpattn tda (2 views)": lambda q, k, v, q2, k2: lpattn.threshold_attention(
            q, k, v, q2=q2, k2=k2, lam=lam, causal=True),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = (args.batch, args.heads, args.tokens, args.dim)
    q, k, v, q2, k2 = (torch.randn(shape, requires_grad=True) for _ in range(5))
    upstream = torch.randn(shape)
    candidates = arms(args.heads)
    times = {name: {"fwd": [], "fwd+bwd": []} for name in candidates}
    for _ in range(args.reps):
        for name, op in candidates.items():  # interleaved: every arm sees the same noise
            start = time.perf_counter()
            o = op(q, k, v, q2, k2)
            middle = time.perf_counter()
            o.backward(upstream)
            end = time.perf_counter()
            times[name]["fwd"].append(middle - start)
            times[name]["fwd+bwd"].append(end - start)
    base = statistics.median(times["torch (written out)"]["fwd+bwd"])
    print(f"B={args.batch} H={args.heads} T={args.tokens} D={args.dim}, causal, "
          f"{torch.get_num_threads()} threads, median of {args.reps} interleaved reps, "
          f"lpattn target {lpattn.info().target_chosen}")
    print(f"{'attention':24s} {'fwd ms':>8s} {'fwd+bwd ms':>11s} {'vs torch':>9s}")
    for name, t in times.items():
        total = statistics.median(t["fwd+bwd"])
        print(f"{name:24s} {1000 * statistics.median(t['fwd']):8.2f} {1000 * total:11.2f} "
              f"{base / total:8.2f}x")


if __name__ == "__main__":
    main()

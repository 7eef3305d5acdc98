#!/usr/bin/env python3
"""Trains the byte-level GPT of gpt.py on the Brown corpus with the attention you choose, and
prints the loss and the time per step (docs/python.md §5).

    PYTHONPATH=build/python python3 examples/python/train_gpt.py --attention exact
    PYTHONPATH=build/python python3 examples/python/train_gpt.py --attention torch
    ... --attention kint --kint K=4,round=nearest,ste=weight
    ... --attention exact --precision qk=int8:pv=int8

The corpus is the harness's (scripts/fetch_corpus.sh puts it in ~/.cache/lpattn/brown.txt).
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402

import lpattn  # noqa: E402


def corpus_path(given):
    if given:
        return given
    base = os.environ.get("LPATTN_DATA_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "lpattn")
    return os.path.join(base, "brown.txt")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", default="exact", choices=gpt.ATTENTIONS)
    parser.add_argument("--kint", default="K=8,ste=weight", help="K-interval options")
    parser.add_argument("--precision", default="", help="lpattn precision option")
    parser.add_argument("--data", default="", help="a text file (default: the Brown corpus)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--json", default="", help="write the results here too")
    return parser.parse_args()


@torch.no_grad()
def evaluate(model, data, config, batches=8):
    generator = torch.Generator().manual_seed(1234)
    losses = [model(*gpt.batches(data, 16, config.context, generator))[1].item()
              for _ in range(batches)]
    return sum(losses) / len(losses)


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = corpus_path(args.data)
    if not os.path.isfile(path):
        sys.exit(f"train_gpt: {path} not found; run scripts/fetch_corpus.sh or pass --data")
    with open(path, "rb") as f:
        raw = f.read()
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]

    torch.manual_seed(args.seed)
    config = gpt.GPTConfig(layers=args.layers, width=args.width, heads=args.heads,
                           context=args.context, attention=args.attention, kint=args.kint,
                           precision=args.precision)
    model = gpt.GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    generator = torch.Generator().manual_seed(args.seed)
    print(f"train_gpt: {args.attention} attention, {sum(p.numel() for p in model.parameters())} "
          f"parameters, {args.steps} steps of {args.batch}x{args.context} bytes, "
          f"{torch.get_num_threads()} threads, data {path}")
    step_times, history = [], []
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / 30)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = gpt.batches(train_data, args.batch, args.context, generator)
        start = time.perf_counter()
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step_times.append(time.perf_counter() - start)
        if step % args.eval_every == 0 or step == args.steps:
            val = evaluate(model, val_data, config)
            history.append({"step": step, "train_loss": loss.item(), "val_loss": val})
            print(f"step {step:5d}  train {loss.item():.4f}  val {val:.4f}  "
                  f"{1000 * statistics.median(step_times[-args.eval_every:]):.1f} ms/step")
    result = {"attention": args.attention, "kint": args.kint, "precision": args.precision,
              "threads": torch.get_num_threads(), "steps": args.steps,
              "median_step_ms": 1000 * statistics.median(step_times),
              "final_val_loss": history[-1]["val_loss"], "history": history,
              "lpattn_target": lpattn.info().target_chosen}
    print(f"median step {result['median_step_ms']:.1f} ms, final val loss "
          f"{result['final_val_loss']:.4f}")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()

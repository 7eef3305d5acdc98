#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/ (docs/design.md §10).

Each seed is a small input that reaches deep into its target: kernel cases of every entry point
(byte 0 picks it) at a few sizes, option texts of every parser (byte 0 picks it), configs of the
presets, valid and damaged checkpoints of a tiny model, and corpora with and without document
separators. Deterministic: rerunning it rewrites the same files, so the committed seeds can be
checked against it.
Usage: make_fuzz_seeds.py [REPOSITORY_ROOT]   (default: the repository holding this script)
"""
import json
import os
import random
import shutil
import struct
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def kernel_seeds():
    """Per entry point (exact, stored K/V, K-interval, threshold, value gate, and the cached
    forwards with 16-bit Q and O, K-interval and thresholded): a short case, whose values come
    from the target's own hash past the input's end, and two longer random ones. New entry
    points go at the end, so that the earlier seeds stay the same."""
    rng = random.Random(20)
    names = ["exact", "stored_kv", "kinterval", "threshold", "value_gate",
             "cached16", "cached_kinterval", "cached_threshold"]
    for selector, name in enumerate(names):
        write("fuzz_kernels", f"{name}_short", bytes([selector]) + bytes(rng.randrange(256) for _ in range(48)))
        for size in (512, 4096):
            data = bytes([selector]) + bytes(rng.randrange(256) for _ in range(size))
            write("fuzz_kernels", f"{name}_{size}", data)


def option_seeds():
    texts = [
        (0, "K=4"), (0, "K=16,cal=window,W=3,round=nearest,ste=prob"),
        (0, "K=4:cal=minmax:round=nearest:ste=weight:slope=grid"), (0, "K=64,ste=prob,jac=grid,grid=bf16"),
        (1, "views=2,p=2,beta=1,kappa=1,l2=1"), (1, "views=1:p=3:beta=0.5"),
        (2, "qk=int8,pv=bf16,p=int8,gran=token"), (2, "qk=fp8e4m3:pv=fp8e5m2:vgran=channel:block=32:smooth_k=1:path=sim"),
        (2, "bwd=int8,bwd_dp=fp16"),
        (3, "exact"), (3, "kint:K=4,cal=window"), (3, "exact+qk=int8:pv=int8"), (3, "sink:softcap=30,window=8,alibi=1"),
        (3, "tda:views=1"), (3, "outgate+sink+normgate"), (3, "exact+dense=bf16"),
        (4, "noise:rho=0.1,sigma=2"), (4, "swap:rho=0.25:layer=2:seed=7"), (4, "none"),
        (5, "bf16"),
    ]
    for i, (selector, text) in enumerate(texts):
        write("fuzz_options", f"seed_{i:02d}", bytes([selector]) + text.encode())


def config(preset="tiny", **changes):
    model = {"n_layer": 2, "n_head": 2, "n_embd": 64, "context": 64, "vocab": 256}
    c = {"preset": preset, "arm": "exact", "model": model, "seed": 1, "batch": 8, "steps": 300,
         "lr": 0.001, "warmup_steps": 30, "min_lr_fraction": 0.1, "weight_decay": 0.1,
         "beta1": 0.9, "beta2": 0.95, "eps": 1e-08, "grad_clip": 1.0, "eval_every": 50,
         "eval_windows": 64, "checkpoint_every": 100, "data": "", "threads": 0}
    for key, value in changes.items():
        if key in model:
            model[key] = value
        else:
            c[key] = value
    return c


def config_seeds():
    configs = [
        config(), config(arm="kint:K=4,cal=window"), config(pos="rope", precision="bf16"),
        config(preset="small", n_layer=4, n_head=4, n_embd=128, interference="noise:rho=0.1:sigma=1"),
        config(init_seed=3, data_seed=4, arm="exact+qk=int8:pv=int8"),
    ]
    for i, c in enumerate(configs):
        write("fuzz_config", f"config_{i}.json", json.dumps(c).encode())


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint_body(c, params, step=10):
    text = json.dumps(c, separators=(",", ":")).encode()
    out = b"LPATTNCK" + struct.pack("<I", 1) + struct.pack("<Q", len(text)) + text
    out += struct.pack("<q", step)
    for _ in range(3):
        out += struct.pack("<Q", len(params)) + struct.pack(f"<{len(params)}f", *params)
    return out


def checkpoint_seeds():
    """Byte 0 odd: the target appends the checksum; even: the file is taken as it is."""
    # A model of one layer, one head, width 4, context 4: 256*4 + 4*4 + (12*16 + 13*4) + 2*4.
    tiny = config(n_layer=1, n_head=1, n_embd=4, context=4, eval_every=1, checkpoint_every=1)
    count = 256 * 4 + 4 * 4 + 12 * 16 + 13 * 4 + 2 * 4
    params = [((i * 37) % 101 - 50) / 100.0 for i in range(count)]
    body = checkpoint_body(tiny, params)
    write("fuzz_checkpoint", "tiny_model", b"\x01" + body)
    write("fuzz_checkpoint", "tiny_model_with_its_checksum", b"\x00" + body + struct.pack("<Q", fnv1a64(body)))
    write("fuzz_checkpoint", "wrong_param_count", b"\x01" + checkpoint_body(tiny, params[:10]))
    write("fuzz_checkpoint", "rope_model", b"\x01" + checkpoint_body(config(n_layer=1, n_head=1, n_embd=4, context=4, pos="rope", eval_every=1, checkpoint_every=1), params[:count - 16]))
    write("fuzz_checkpoint", "empty_arrays", b"\x01" + checkpoint_body(config(), []))


def corpus_seeds():
    rng = random.Random(5)
    words = "the of and to a in that is was he for it with as his on be at by".split()
    docs = [" ".join(rng.choice(words) for _ in range(rng.randrange(5, 40))) for _ in range(12)]
    write("fuzz_corpus", "twelve_documents", bytes([15, 1]) + "\n\x1e\n".join(docs).encode())
    write("fuzz_corpus", "one_document", bytes([7, 0]) + docs[0].encode() * 4)
    write("fuzz_corpus", "separators_only", bytes([0, 2]) + b"\x1e\n\x1e\n\x1e")
    write("fuzz_corpus", "utf8", bytes([3, 3]) + ("na\u00efve caf\u00e9 \u2014 " * 8).encode())


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    kernel_seeds()
    option_seeds()
    config_seeds()
    checkpoint_seeds()
    corpus_seeds()
    total = sum(len(files) for _, _, files in os.walk(CORPUS))
    print(f"make_fuzz_seeds: {total} seeds under {CORPUS}")


if __name__ == "__main__":
    main()

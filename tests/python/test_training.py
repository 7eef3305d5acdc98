"""A two-layer GPT with lpattn's attention trains on generated text (docs/python.md §4): its
loss falls, and the same model with PyTorch's attention written out follows the same loss
curve within float32 noise for the first steps."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import gpt  # noqa: E402  (examples/python/gpt.py)


def generated_text(length=20000, seed=0):
    """Bytes of a small random grammar: words from a fixed vocabulary in a repeating order
    with random choices, so that the next byte is learnable from the context."""
    generator = torch.Generator().manual_seed(seed)
    words = [b"the", b"cat", b"sat", b"on", b"a", b"mat", b"and", b"dog", b"ran", b"far"]
    text = bytearray()
    while len(text) < length:
        start = int(torch.randint(len(words), (1,), generator=generator))
        for i in range(4):
            text += words[(start + 3 * i) % len(words)] + b" "
        text += b". "
    return torch.tensor(list(text[:length]), dtype=torch.uint8)


def train(attention, steps, seed=1):
    torch.manual_seed(seed)
    config = gpt.GPTConfig(layers=2, width=32, heads=4, context=32, attention=attention)
    model = gpt.GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = generated_text()
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = gpt.batches(data, 8, config.context, generator)
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_lpattn_model_learns_and_matches_pytorch_attention():
    lpattn_losses = train("exact", 60)
    torch_losses = train("torch", 6)
    # The same initialisation, data and arithmetic up to fp32 summation order: the same curve.
    for step, (ours, theirs) in enumerate(zip(lpattn_losses, torch_losses)):
        assert abs(ours - theirs) < 1e-4 * theirs, (step, ours, theirs)
    assert lpattn_losses[0] > 5.0  # ln(256) = 5.55 at initialisation
    assert sum(lpattn_losses[-5:]) / 5 < lpattn_losses[0] - 2.0


def test_every_attention_of_the_example_trains():
    for attention in gpt.ATTENTIONS:
        losses = train(attention, 15)
        assert all(loss == loss for loss in losses), attention  # no NaN
        assert losses[-1] < losses[0] - 0.5, (attention, losses[0], losses[-1])

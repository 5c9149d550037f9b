"""Train Medusa (or, with --sequential, Hydra) heads on the frozen shipped target.

    python scripts/train_heads.py --steps 300                                  # medusa_heads.pt
    python scripts/train_heads.py --sequential --steps 1000 --batch-size 32    # hydra_heads.pt

The loss is medusa_loss in scripts/training.py (self-distillation on the target's own
distribution); the held-out accuracy of each head's ranked guesses is stored with the weights (it
shapes the default static tree, minispec.methods.heads.medusa_tree).
"""
import argparse
import time

import torch

from minispec.kit.data import heldout
from minispec.methods import MedusaHeads
from minispec.model import WEIGHTS_DIR, load_model
from train import corpus_files, load_bytes
from training import get_batch, hidden_states, medusa_loss, unroll  # scripts/training.py


@torch.no_grad()
def head_accuracy(model, heads, data, top=4, block_size=256, max_windows=16):
    """accuracy[i][r]: fraction of positions where head i's rank-r guess is the target's argmax at
    t + 2 + i (sequential heads read the true tokens before their guess). data: a byte tensor, read
    in windows, or a list of token sequences, e.g. prompts + their greedy continuations (the regime
    heads are used in)."""
    hits, total = torch.zeros(len(heads.res), top), torch.zeros(len(heads.res), 1)
    if isinstance(data, list):
        windows = [torch.as_tensor(seq) for seq in data]
    else:
        n = min(max_windows, (len(data) - 1) // block_size)
        windows = [data[w * block_size:(w + 1) * block_size] for w in range(n)]
    for x in windows:
        h = hidden_states(model, x[None])
        best = model.lm_head(h)[0].argmax(-1)  # (T,)
        for i, lg in enumerate(unroll(heads, h, x[None])):
            hits[i] += (lg[0].topk(top, -1).indices == best[1 + i:, None]).float().sum(0)
            total[i] += lg.shape[1]
    return (hits / total).tolist()


def train_heads(model, n_heads=4, steps=300, batch_size=8, block_size=128, lr=3e-3, seed=0,
                log_every=50, data=None, held=None, sequential=False):
    """Medusa-1 (or Hydra: sequential=True) heads trained on the frozen target (data, held: byte
    tensors; default the training corpus and the shipped held-out text)."""
    data = load_bytes(corpus_files()[0]) if data is None else data
    held = heldout() if held is None else held
    heads, g = MedusaHeads(model, n_heads, sequential), torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    for step in range(1, steps + 1):
        loss = medusa_loss(model, heads, get_batch(data, batch_size, block_size, g)[0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log_every and (step % log_every == 0 or step == steps):
            print(f"step {step}/{steps}  loss {loss.item():.3f}", flush=True)
    heads.accuracy = head_accuracy(model, heads, held)
    return heads


def save_heads(heads, path, **card):
    state = {k: v.half() for k, v in heads.state_dict().items()}  # fp16 on disk, like the models
    torch.save(dict(n_heads=len(heads.res), sequential=heads.sequential, state_dict=state,
                    accuracy=heads.accuracy, card=card), path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="target", help="shipped model name or path to a .pt file")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--sequential", action="store_true",
                    help="Hydra heads: each reads the token before its guess")
    ap.add_argument("--out", default=None)
    args, t0 = ap.parse_args(argv), time.time()
    name = "hydra_heads.pt" if args.sequential else "medusa_heads.pt"
    out = args.out or str(WEIGHTS_DIR / name)
    heads = train_heads(load_model(args.target), args.heads, args.steps, args.batch_size,
                        sequential=args.sequential)
    print("held-out top-1 accuracy per head:", " ".join(f"{a[0]:.3f}" for a in heads.accuracy))
    cmd = (f"python scripts/train_heads.py --heads {args.heads} --steps {args.steps} "
           f"--batch-size {args.batch_size}")
    save_heads(heads, out, command=cmd + " --sequential" * args.sequential,
               train_seconds=round(time.time() - t0))
    print(f"saved {out} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()

"""EAGLE-3's feature fusion on minispec's target, measured against the plain EAGLE head.

    python scripts/eagle3_experiment.py [--steps 1200] [--device cuda]

EAGLE-3 (Li et al. 2025) feeds its draft head a fusion of low, middle and high layer features of the
target instead of the top feature alone. Here the fused input at a position the target computed is
    g_t = FC([h_2 ; h_4 ; f_6])_t     (the residual stream after blocks 2 and 4, and f = ln_f(h_6)),
read by the same one-block head as EAGLE's (minispec.methods.eagle.EagleHead), trained with the
same loss (scripts/train_eagle.py: feature regression on the top feature plus token cross-entropy).
Deeper draft steps have only the head's own predicted top feature, so they read
FC([0 ; 0 ; f_hat]); to prepare the head for that, training zeroes the low and middle features at
half the positions.
(EAGLE-3 itself instead trains the head on its own outputs, "training-time test", and drops the
feature regression: not done here.) Both heads start from the same seed, see the same batches for
the same steps, and are compared by held-out top-1 accuracy at draft depths 1-5 (eagle_accuracy's
protocol). Saves no weights: copy the output into figures/eagle3.md.
"""
import math
import time

import torch
import torch.nn as nn

from minispec.kit.data import heldout
from minispec.methods.eagle import EagleHead
from minispec.model import load_model
from train import corpus_files, load_bytes
from train_eagle import eagle_accuracy, eagle_loss, parser
from training import get_batch, hidden_states  # scripts/training.py


class Fusion(nn.Module):
    """[h_2 ; h_4 ; f_6] (B, T, 3C) -> the head's input g (B, T, C)."""

    def __init__(self, target, layers=(2, 4)):
        super().__init__()
        self.layers, self.target, C = layers, (target,), target.config.n_embd
        self.fc = nn.Linear(3 * C, C)

    def forward(self, x, drop=0.0, generator=None):
        """Token ids (B, T) -> (the fused features g (B, T, C), the top ones f (B, T, C))."""
        t, hs, h, start = self.target[0], [], None, 0
        with torch.no_grad():
            h = t.embed(x, torch.arange(x.shape[1], device=x.device))
            for end in (*self.layers, t.config.n_layer):
                h = t.blocks(h, layers=range(start, end))
                hs.append(h)
                start = end
            f = t.ln_f(h)
        low = torch.cat(hs[:-1], -1)
        if drop:  # zero the low and middle features at a fraction of positions (deeper steps: none)
            keep = (torch.rand(x.shape, generator=generator) >= drop).to(low)[..., None]
            low = low * keep
        return self.fc(torch.cat([low, f], -1)), f

    def own(self, f_hat):  # a deeper step: only the head's own predicted top feature
        return self.fc(torch.cat([f_hat.new_zeros(2 * f_hat.shape[-1]), f_hat], -1))


def train(target, data, fused, args):
    torch.manual_seed(args.seed)
    head, g = EagleHead(target).to(args.device), torch.Generator().manual_seed(args.seed)
    fusion = Fusion(target).to(args.device) if fused else None
    params = list(head.parameters()) + (list(fusion.parameters()) if fused else [])
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:  # train_eagle.py's schedule: warmup, cosine decay to a tenth
            cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * step / args.steps))
            group["lr"] = args.lr * min(1.0, step / 100) * cosine
        x = get_batch(data, args.batch_size, args.block_size, g)[0].to(args.device)
        if fused:
            gin, f = fusion(x, drop=0.5, generator=g)
        else:
            with torch.no_grad():
                f = hidden_states(target, x)
            gin = None
        loss = eagle_loss(head, f, x, generator=g, g=gin)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 200 == 0 or step == args.steps:
            print(f"  {'fused' if fused else 'plain'} step {step}/{args.steps}  "
                  f"loss {loss.item():.4f}", flush=True)
    return head.eval(), fusion.eval() if fused else None


def main(argv=None):
    ap = parser(__doc__.splitlines()[0])  # train_eagle.py's options and defaults
    ap.add_argument("--windows", type=int, default=16, help="held-out windows for the accuracy")
    ap.add_argument("--device", default="cpu")
    args, t0 = ap.parse_args(argv), time.time()
    target = load_model("target").to(args.device).requires_grad_(False)
    data, held = load_bytes(corpus_files()[0]), heldout()
    print(f"{args.steps} steps of {args.batch_size} x {args.block_size} tokens each, "
          f"seed {args.seed}, {args.device}")
    rows = {}
    for fused in (False, True):
        head, fusion = train(target, data, fused, args)
        with torch.no_grad():
            rows[fused] = eagle_accuracy(target, head, held, windows=args.windows,
                                         inputs=(lambda x: fusion(x)[0]) if fused else None,
                                         own=fusion.own if fused else None)
        print(f"  trained in {time.time() - t0:.0f} s", flush=True)
    print("\n| head | top-1 accuracy at draft depth 1 / 2 / 3 / 4 / 5 (held out) |\n|---|---|")
    for fused, name in ((False, "EAGLE: top feature f"), (True, "fused: FC([h_2 ; h_4 ; f])")):
        print(f"| {name} | " + " / ".join(f"{a:.3f}" for a in rows[fused]) + " |")


if __name__ == "__main__":
    main()

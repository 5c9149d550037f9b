"""Train the EAGLE head (minispec.methods.eagle) on the frozen shipped target's features.

    python scripts/train_eagle.py     # minispec/weights/eagle_head.pt (24 minutes on one busy core)

Each step reads random windows of the training corpus (the local standard library, as for the
models), computes the target's features f = ln_f(h_N) without gradients, and fits the head with
eagle_loss (minispec/kit/training.py: feature regression + token cross-entropy, noise on the
input features). The held-out top-1 accuracy at draft depths 1..5 (the head reading its own
predicted features after depth 1, the true tokens fed in, as for the Hydra heads) is stored with
the weights. Batches and features come from scripts/training.py.
"""
import argparse
import math
import time

import torch

from minispec.kit.data import heldout
from minispec.methods.eagle import EagleHead
from minispec.model import WEIGHTS_DIR, KVCache, load_model
from train import corpus_files, load_bytes
from training import eagle_loss, get_batch, hidden_states  # scripts/training.py


@torch.no_grad()
def eagle_accuracy(target, head, data, depth=5, windows=8, block_size=128, every=4, inputs=None,
                   own=None):
    """accuracy[d]: how often the head's top-1 guess at draft depth d + 1 is the target's argmax
    token, starting every `every` positions of held-out windows (true features before the start,
    then its own). inputs(x (1, T)) -> (1, T, C), own(f_hat (C,)) -> (C,): what the head reads at
    the target's positions and at its own (default: the top features f, and f_hat itself)."""
    hits, total, w_ = torch.zeros(depth), 0, target.wte.weight
    for w in range(windows):
        s = w * ((len(data) - 1) // windows)
        x = data[s:s + block_size].to(w_.device)
        f = hidden_states(target, x[None])[0]  # (T, C)
        g = f if inputs is None else inputs(x[None])[0]
        best = target.lm_head(f).argmax(-1)    # (T,): the target's token after each position
        cache = KVCache(head.config, size=2 * head.config.block_size, device=w_.device,
                        dtype=w_.dtype)
        for t in range(1, block_size - depth):  # the true pair (g_{t-1}, x_t) -> f_hat_t
            f_hat = head(g[None, t - 1:t], x[None, t:t + 1], cache)[0, 0]
            if t % every:
                continue
            L, total = cache.length, total + 1
            for d in range(depth):  # deeper: the head reads its own f_hat and the true x_{t+d}
                if d:
                    f_in = f_hat if own is None else own(f_hat)
                    f_hat = head(f_in[None, None], x[None, t + d:t + d + 1], cache)[0, 0]
                hits[d] += int(head.logits(f_hat).argmax()) == int(best[t + d])
            cache.crop(L)
    return (hits / total).tolist()


def parser(description):
    """The training options (the shipped head's recipe as defaults), shared with
    eagle3_experiment.py."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv=None):
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(WEIGHTS_DIR / "eagle_head.pt"))
    args, t0 = ap.parse_args(argv), time.time()
    torch.manual_seed(args.seed)
    target = load_model("target").requires_grad_(False)
    data, held = load_bytes(corpus_files()[0]), heldout()
    head, g = EagleHead(target), torch.Generator().manual_seed(args.seed)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:  # warmup, then cosine decay to a tenth
            frac = step / args.steps
            cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * frac))
            group["lr"] = args.lr * min(1.0, step / 100) * cosine
        x = get_batch(data, args.batch_size, args.block_size, g)[0]
        with torch.no_grad():
            f = hidden_states(target, x)
        loss = eagle_loss(head, f, x, generator=g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == args.steps:
            print(f"step {step}/{args.steps}  loss {loss.item():.4f}  {time.time() - t0:.0f}s",
                  flush=True)
        if step % 500 == 0 or step == args.steps:
            windows = 4 if step < args.steps else 16
            head.accuracy = eagle_accuracy(target, head.eval(), held, windows=windows)
            head.train()
            print("held-out top-1 accuracy by draft depth:",
                  " ".join(f"{a:.3f}" for a in head.accuracy), flush=True)
            state = {k: v.half() for k, v in head.state_dict().items()}  # fp16 on disk
            command = (f"python scripts/train_eagle.py --steps {args.steps} "
                       f"--batch-size {args.batch_size} --lr {args.lr}")
            card = dict(command=command, steps=step, batch_size=args.batch_size,
                        block_size=args.block_size, lr=args.lr,
                        train_seconds=round(time.time() - t0))
            torch.save(dict(state_dict=state, accuracy=head.accuracy, card=card), args.out)
    print(f"saved {args.out} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()

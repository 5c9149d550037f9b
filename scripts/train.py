"""Train the shipped byte-level models on the Python standard library's own source.

    python scripts/train.py --model target    # 6 layers, d=256, early-exit loss
    python scripts/train.py --model draft     # 1 layer,  d=128
    python scripts/train.py --distill         # the draft distilled on the target (draft_distilled)

The corpus is every `.py` file of the running Python's standard library except tests: it is on
every machine, needs no download, and is code, where speculative decoding shines. A fixed list
of files is held out for evaluation and for the benchmark prompts; a copy of them ships with the
package (minispec.kit.data), so only training reads the local standard library.

Early-exit loss (LayerSkip, Elhoushi et al. 2024): the logits after *every* block, through the
shared final LayerNorm and head, are trained to predict the next byte,
    loss = CE(exit_N) + sum_{l<N} (l / N) * CE(exit_l) / (N - 1),
so that the first few layers of the target can later draft for the full model (notebook 06).
The training pieces (saving, batches, every exit's logits, the loss) are in scripts/training.py.
"""
import argparse
import math
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from minispec.kit.data import HELD_OUT, alignment, bits_per_byte
from minispec.model import GPT, GPTConfig, WEIGHTS_DIR, load_model
from training import early_exit_loss, exit_logits, get_batch, save_model  # scripts/training.py

PRESETS = {
    "target": dict(n_layer=6, n_head=8, n_embd=256, steps=1500, batch_size=8, lr=1.5e-3,
                   early_exit=True),
    "draft": dict(n_layer=1, n_head=4, n_embd=128, steps=2000, batch_size=16, lr=3e-3,
                  early_exit=False),
}


def corpus_files():
    """(train files, held-out files) of the standard library, sorted, tests excluded."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
    files = sorted(p for p in root.rglob("*.py")
                   if not skip & set(p.relative_to(root).parts[:-1])
                   and not p.name.startswith("test_"))
    held = [p for p in files if p.parent == root and p.name in HELD_OUT]
    return [p for p in files if p not in held], held


def load_bytes(files):
    text = b"".join(p.read_bytes() + b"\n\n" for p in files)
    return torch.tensor(list(text), dtype=torch.long)


def train(name, n_layer, n_head, n_embd, steps, batch_size, lr, early_exit, block_size=256,
          seed=0, out=None, log_every=None, resume=None):
    torch.manual_seed(seed)
    train_files, held_files = corpus_files()
    data, held = load_bytes(train_files), load_bytes(held_files)
    print(f"corpus: {len(train_files)} files, {len(data)/1e6:.1f}M bytes; "
          f"held out {len(held)/1e3:.0f}K bytes")
    model = GPT(GPTConfig(256, block_size, n_layer, n_head, n_embd))
    if resume:  # a second phase: start from saved weights, fresh optimizer and schedule
        model.load_state_dict(load_model(resume).state_dict())
    print(f"{name}: {sum(p.numel() for p in model.parameters())/1e6:.2f}M parameters")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(seed)
    out = Path(out or WEIGHTS_DIR / f"{name}.pt")
    out.parent.mkdir(parents=True, exist_ok=True)
    warmup, t0 = max(1, min(100, steps // 10)), time.time()
    for step in range(1, steps + 1):
        for group in opt.param_groups:  # linear warmup, then cosine decay to lr / 10
            frac = max(0.0, (step - warmup) / max(1, steps - warmup))
            cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * frac))
            group["lr"] = lr * min(1.0, step / warmup) * cosine
        model.train()
        x, y = get_batch(data, batch_size, block_size, g)
        if early_exit:  # the logits after every block, through the shared ln_f and head
            loss, ce = early_exit_loss(exit_logits(model, x), y)
        else:
            loss, ce = F.cross_entropy(model(x).flatten(0, 1), y.flatten()), None
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % (log_every or max(1, steps // 60)) == 0 or step == steps:
            tps = step * batch_size * block_size / (time.time() - t0)
            final = (ce[-1] if ce else loss).item() / math.log(2)
            print(f"step {step}/{steps}  loss {loss.item():.3f}  final-exit {final:.3f} bits/byte  "
                  f"{tps:.0f} tok/s", flush=True)
        if step % 500 == 0 and step < steps:  # a checkpoint to look at while training goes on
            save_model(model.eval(), out, steps=step, partial=True)
    bpb = bits_per_byte(model, held, block_size)
    print("held-out bits/byte per exit:", " ".join(f"{b:.3f}" for b in bpb))
    save_model(model.eval(), out, steps=steps, batch_size=batch_size, block_size=block_size,
               lr=lr, early_exit=early_exit, seed=seed, held_out_bits_per_byte=bpb,
               train_seconds=round(time.time() - t0), held_out_files=list(HELD_OUT))
    print(f"saved {out}")
    return model, bpb


def agreement(teacher, student, data, block_size=128, windows=32):
    """Held-out (top-1 agreement, 1 - TV) on the first windows of data, as the model card's
    figures were measured (minispec.kit.data.alignment with spread=False)."""
    return alignment(teacher, student, data, block_size, windows, spread=False)


def distill(teacher="target", student="draft", steps=300, batch_size=16, block_size=128, lr=1e-3,
            seed=0, out=None):
    """DistillSpec-style (Zhou et al. 2024): train the draft on the target's own distribution.

    Start from the shipped draft and minimise KL(p || q) between the target's next-byte
    distribution p and the draft's q at every position of corpus windows: q moves toward p, so
    alpha = 1 - TV(p, q) (sampling) and the argmax agreement (greedy) go up.
    """
    torch.manual_seed(seed)
    train_files, held_files = corpus_files()
    data, held = load_bytes(train_files), load_bytes(held_files)
    target, model = load_model(teacher), load_model(student)
    before = agreement(target, model, held)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    g, t0 = torch.Generator().manual_seed(seed), time.time()
    for step in range(1, steps + 1):
        for group in opt.param_groups:  # short warmup, then linear decay
            group["lr"] = lr * min(1.0, step / 20) * (1 - step / (steps + 1))
        x, _ = get_batch(data, batch_size, block_size, g)
        with torch.no_grad():
            log_p = F.log_softmax(target(x), -1)  # (B, T, V)
        log_q = F.log_softmax(model.train()(x), -1)  # (B, T, V)
        loss = F.kl_div(log_q.flatten(0, 1), log_p.flatten(0, 1), log_target=True,
                        reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % max(1, steps // 10) == 0:
            print(f"step {step}/{steps}  KL(p||q) {loss.item():.3f} nats  "
                  f"{time.time() - t0:.0f}s", flush=True)
    after = agreement(target, model.eval(), held)
    print(f"held-out top-1 agreement {before[0]:.3f} -> {after[0]:.3f}, "
          f"1 - TV {before[1]:.3f} -> {after[1]:.3f}")
    out = Path(out or WEIGHTS_DIR / "draft_distilled.pt")
    save_model(model, out, distilled_from=teacher, student=student, steps=steps,
               batch_size=batch_size, block_size=block_size, lr=lr, seed=seed,
               agreement_before=before, agreement_after=after,
               train_seconds=round(time.time() - t0))
    print(f"saved {out}")
    return model, before, after


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Train a minispec model on the standard library's source.")
    ap.add_argument("--model", choices=sorted(PRESETS))
    ap.add_argument("--distill", action="store_true",
                    help="distill the draft on the target (DistillSpec)")
    ap.add_argument("--steps", type=int, help="override the preset's number of steps")
    ap.add_argument("--out", help="where to save (default: minispec/weights/<model>.pt)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, help="override the preset's peak learning rate")
    ap.add_argument("--resume",
                    help="start from these weights (a .pt file) instead of a random init")
    args = ap.parse_args(argv)
    if args.distill:
        return distill(steps=args.steps or 300, seed=args.seed, out=args.out)
    if args.model is None:
        ap.error("give --model or --distill")
    cfg = dict(PRESETS[args.model])
    if args.steps:
        cfg["steps"] = args.steps
    if args.lr:
        cfg["lr"] = args.lr
    train(args.model, seed=args.seed, out=args.out, resume=args.resume, **cfg)


if __name__ == "__main__":
    main()

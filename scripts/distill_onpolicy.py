"""On-policy distillation of the draft (DistillSpec, Zhou et al. 2024): train the draft on text
the draft itself writes, against the frozen target's distribution at every position.

    python scripts/distill_onpolicy.py --divergence tv --steps 3000 --lr 1.5e-3  # draft_onpolicy
    python scripts/distill_onpolicy.py --divergence kl --steps 150 --out /tmp/kl.pt   # a pilot

Why on-policy: during speculative decoding the draft is asked for its next-byte distribution q on
contexts it wrote itself (the draft tokens of a round), so those are the contexts where q should
match the target's p. Each batch therefore mixes
  - on-policy rows: a corpus prefix of `prefix` bytes (a prompt), continued by the draft sampling
    at temperature 1 to the end of its block (the contexts it meets at T = 1), and
  - corpus rows: plain training windows (the contexts after a round's accepted bytes),
and the loss is a divergence between p (the target, frozen) and q (the draft) at every position:
  - forward KL:  KL(p || q) = sum_x p(x) (log p(x) - log q(x))
  - total variation:  TV(p, q) = 1/2 sum_x |p(x) - q(x)|,
the second being exactly what sampled acceptance rewards: alpha = 1 - TV(p, q) (Leviathan et al.
2023, Chen et al. 2023). DistillSpec finds the best divergence depends on the task; the model card
records the two pilots that chose the one shipped. Rows span the draft's whole block (256 bytes):
trained on 128-byte rows only, a draft's later positions drift from the rest of the network and its
drafts there fail (a first run did that: 1 - TV 0.79 before position 128, 0.44 after). Progress
prints every tenth of the run: 1 - TV on the first 4 KB (train.agreement, 128-byte windows) and on
256-byte windows over all six held-out files (minispec.kit.data.alignment).
"""
import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from minispec.kit.data import alignment
from minispec.model import WEIGHTS_DIR, load_model
from train import agreement, corpus_files, load_bytes  # scripts/train.py
from training import divergence, draft_rollouts, get_batch, save_model  # scripts/training.py


def distill(kind="tv", steps=1500, batch_size=16, on_policy=0.5, block_size=256, prefix=128,
            lr=1e-3, seed=0, out=None, start="draft"):
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    train_files, held_files = corpus_files()
    data, held = load_bytes(train_files), load_bytes(held_files)
    target, model = load_model("target"), load_model(start)
    before = agreement(target, model, held)
    print(f"start from {start}: held-out top-1 {before[0]:.3f}, 1 - TV {before[1]:.3f}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    g, t0 = torch.Generator().manual_seed(seed), time.time()
    n_on = round(batch_size * on_policy)
    for step in range(1, steps + 1):
        for group in opt.param_groups:  # short warmup, then linear decay
            group["lr"] = lr * min(1.0, step / 20) * (1 - step / (steps + 1))
        x, _ = get_batch(data, batch_size, block_size, g)
        if n_on:
            x[:n_on] = draft_rollouts(model.eval(), x[:n_on, :prefix], block_size - prefix, g)
        with torch.no_grad():
            log_p = F.log_softmax(target(x), -1)  # (B, T, V), the frozen target
        log_q = F.log_softmax(model.train()(x), -1)
        loss = divergence(log_p, log_q, kind)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % max(1, steps // 10) == 0:
            top1, alpha = agreement(target, model.eval(), held)
            whole = alignment(target, model, held)  # 256-byte windows: every position it meets
            print(f"step {step}/{steps}  {kind} {loss.item():.4f}  held-out top-1 {top1:.3f}  "
                  f"1 - TV {alpha:.3f} (first 4 KB), {whole[1]:.3f} (all files, 256-byte windows)  "
                  f"{time.time() - t0:.0f}s", flush=True)
    after = agreement(target, model.eval(), held)
    print(f"held-out top-1 agreement {before[0]:.3f} -> {after[0]:.3f}, "
          f"1 - TV {before[1]:.3f} -> {after[1]:.3f}")
    out = Path(out or WEIGHTS_DIR / "draft_onpolicy.pt")
    save_model(model, out, distilled_from="target", start=start, divergence=kind, steps=steps,
               batch_size=batch_size, on_policy=on_policy, block_size=block_size, prefix=prefix,
               lr=lr, seed=seed, agreement_before=before, agreement_after=after,
               train_seconds=round(time.time() - t0))
    print(f"saved {out}")
    return model, before, after


def main(argv=None):
    ap = argparse.ArgumentParser(description="On-policy distillation of the draft (DistillSpec).")
    ap.add_argument("--divergence", choices=["tv", "kl"], default="tv")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--on-policy", type=float, default=0.5,
                    help="share of each batch that the draft writes itself (the rest: corpus)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--block-size", type=int, default=256,
                    help="bytes a row (the draft's whole block: every position it will meet)")
    ap.add_argument("--prefix", type=int, default=128,
                    help="corpus bytes before the draft's own continuation (a prompt's length)")
    ap.add_argument("--start", default="draft", help="weights to start from (a shipped name)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="where to save (default: minispec/weights/draft_onpolicy.pt)")
    args = ap.parse_args(argv)
    if not 0 <= args.on_policy <= 1:
        ap.error(f"--on-policy must be in [0, 1], got {args.on_policy}")
    distill(args.divergence, args.steps, args.batch_size, args.on_policy, args.block_size,
            args.prefix, args.lr, args.seed, args.out, args.start)


if __name__ == "__main__":
    main()

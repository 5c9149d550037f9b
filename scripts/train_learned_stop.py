"""Fit the learned stop's acceptance head (minispec.methods.learned_stop, SpecDec++) on logged
rounds of the shipped pair.

    python scripts/train_learned_stop.py     # minispec/weights/learned_stop.pt (about 2 minutes)

Rounds: the shipped draft drafts fixed chains of GAMMA tokens for the shipped target through the
one loop (speculative_generate), after prompts of 128 bytes cut at line starts of the training
corpus (the local standard library, held-out files excluded: scripts/train.py's corpus_files), at
T = 0 and at T = 1, one seed per prompt. Every drafted token of a round is a row, labelled with
its chance of being kept GIVEN the drafts before it (so the head's product is the chance a whole
chain is kept), from the target's logits of that round (minispec.kit.training.acceptance_rows):
    T = 0: 1 if the draft token is the target's argmax, else 0;
    T = 1: min(1, p(x) / q(x)), the acceptance probability (a soft label: less noise than the
           sampled coin, the same expectation).
The head (a logistic regression, one weight row per regime) is fitted by L-BFGS on the binary
cross-entropy, from zeros (deterministic), and checked on rounds after held-out prompts
(minispec.kit.data.prompts, offset 8: not the benchmarks' prompts).
"""
import argparse
import time

import torch
import torch.nn.functional as F

import minispec as ms
from minispec.kit.data import prompts as heldout_prompts
from minispec.kit.training import acceptance_rows, reliability
from minispec.methods.learned_stop import FEATURES, AcceptanceHead
from minispec.model import WEIGHTS_DIR
from train import corpus_files, load_bytes

GAMMA = 8


def corpus_prompts(n, length=128, seed=0):
    """n prompts of `length` bytes starting at random line starts of the training corpus."""
    data = load_bytes(corpus_files()[0])
    g = torch.Generator().manual_seed(seed)
    out = []
    while len(out) < n:
        start = int(torch.randint(len(data) - 2 * length, (), generator=g))
        nl = (data[start:start + length] == 10).nonzero()
        if len(nl):
            s = start + int(nl[0]) + 1
            out.append(data[s:s + length].tolist())
    return out


def regimes(rows):
    """{T: (f, y, depth)} -> features (N, 3), labels (N,), sampled (N,) bool, all T together."""
    f = torch.cat([r[0] for r in rows.values()])
    y = torch.cat([r[1] for r in rows.values()]).float()
    s = torch.cat([torch.full((len(r[1]),), T > 0) for T, r in rows.items()])
    return f, y, s


def fit(head, f, y, s, steps=100):
    """L-BFGS on the mean binary cross-entropy of head(f, s) against the (soft) labels y."""
    opt = torch.optim.LBFGS(head.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy(head(f, s).clamp(1e-6, 1 - 1e-6), y)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return F.binary_cross_entropy(head(f, s).clamp(1e-6, 1 - 1e-6), y).item()


def train(n_prompts=96, new_tokens=64, heldout_n=10, out=None, seed=0):
    """Log rounds at T = 0 and 1, fit the head, report held-out calibration; save if out."""
    t0 = time.time()
    torch.manual_seed(seed)
    target, draft = ms.load_model("target"), ms.load_model("draft")
    train_p = corpus_prompts(n_prompts, seed=seed)
    held_p = heldout_prompts(heldout_n, offset=8)
    rows = {T: acceptance_rows(target, draft, train_p, T, new_tokens, GAMMA) for T in (0.0, 1.0)}
    held = {T: acceptance_rows(target, draft, held_p, T, new_tokens, GAMMA) for T in (0.0, 1.0)}
    head = AcceptanceHead()
    loss = fit(head, *regimes(rows))
    f, y, s = regimes(held)
    with torch.no_grad():
        a = head(f, s)
        held_loss = F.binary_cross_entropy(a.clamp(1e-6, 1 - 1e-6), y).item()
    n_rows = sum(len(r[1]) for r in rows.values())
    print(f"rows: {n_rows} train, {len(y)} held out; BCE {loss:.4f} train, {held_loss:.4f} held "
          f"out ({time.time() - t0:.0f} s)")
    for T in (0.0, 1.0):
        m = s == (T > 0)
        print(f"T = {T}: held-out reliability (bin, rows, predicted, observed):")
        for lo, hi, n, pa, py in reliability(a[m], y[m]):
            print(f"  [{lo:.1f}, {hi:.1f})  {n:5d}  {pa:.3f}  {py:.3f}")
    if out:
        state = {k: v.detach().half() for k, v in head.state_dict().items()}
        card = dict(n_prompts=n_prompts, new_tokens=new_tokens, gamma=GAMMA, seed=seed,
                    train_bce=round(loss, 4), heldout_bce=round(held_loss, 4))
        ckpt = {"features": FEATURES, "state_dict": state, "card": card}
        torch.save(ckpt, out, _use_new_zipfile_serialization=False)  # 696 bytes, not 2 KB
    return head, loss, held_loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(WEIGHTS_DIR / "learned_stop.pt"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # tiny forwards: one thread is faster on a shared machine
    train(args.prompts, args.new_tokens, out=args.out, seed=args.seed)


if __name__ == "__main__":
    main()

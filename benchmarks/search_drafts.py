"""Search-based drafts (survey section 3.1.2): draft beam search as a tree of guesses, against a
chain and a tree of the same draft model, at temperature 0 and 1; and the lossy top-k shortcut.

    python benchmarks/search_drafts.py [--prompts 8] [--max-new-tokens 64] [--seeds 3]
                                       [--width 4] [--depth 4] [--repeats 2] [--out figures]

1. On the held-out benchmark prompts (minispec.kit.data.prompts), the shipped draft drafts for the
   shipped target four ways: its chain of `depth` tokens (greedy at T = 0, sampled at T = 1, with
   its q), the same chain as deterministic guesses (BeamDrafter, width 1), beam search
   (BeamDrafter(width, depth), the best beams as a prefix tree of gamma = 2 * depth nodes), and
   ModelDrafter's tree with the same gamma (branching (width,) * depth, the `width` best nodes
   expanded per depth: the draft's top-k children at T = 0, iid draws from q at T = 1). Tokens per
   target call over --seeds seeds at T = 1 (one run at T = 0: deterministic), and the paired speedup
   over autoregressive decoding of the same prompt and seed (minispec.kit.timing: alternating, best
   of --repeats; the median per-prompt ratio with its spread, and a verdict against a noise band
   measured at each temperature). At T = 0 every output is checked to equal greedy decoding.
2. Why guesses lose at T > 0: a guess x is kept with probability p(x), a draft sampled from q with
   probability min(1, p(x)/q(x)), on average sum_x min(p, q) = 1 - TV(p, q) (Leviathan et al.
   2023). Both along the held-out text, per position, for the draft's top guess (its argmax) and a
   sample, split by how peaked the target is (max p).
3. The top-k shortcut (minispec.methods.top_k: keep a draft if it is in the target's top k) next to
   Medusa's typical acceptance: the total variation distance of the loop's exact law of 3 new tokens
   from the target's (checks.exact_law, float64 models over 8 tokens, the beam drafter), and the
   tokens per call each rule gives the beam drafter on the shipped pair at T = 1.
Writes figures/search_drafts.md.
"""
import functools
import statistics
import time
from pathlib import Path

import torch

import minispec as ms
from minispec.kit.checks import dense, exact_law, target_law
from minispec.kit.data import heldout, prompts
from minispec.methods import BeamDrafter, topk_accept
from minispec.verify import multi_draft_accept, typical_accept

from common import count, noise_band, out_folder, paired, parser, spread  # benchmarks/common.py
from minispec.kit.timing import agreement as timing_agreement

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def methods(draft, width, depth):
    """name -> (a new drafter, gamma)."""
    gamma = 2 * depth
    return {f"chain of {depth} (ModelDrafter)": (lambda: ms.ModelDrafter(draft), depth),
            f"guess chain of {depth} (beam width 1)": (lambda: BeamDrafter(draft, 1, depth), depth),
            f"beam {width} x {depth}, {gamma} nodes": (lambda: BeamDrafter(draft, width, depth),
                                                        gamma),
            f"tree {gamma} nodes (ModelDrafter)": (
                lambda: ms.ModelDrafter(draft, branching=(width,) * depth, width=width), gamma)}


def decode_rows(target, draft, args, out):
    ids_list, n = prompts(args.prompts), args.max_new_tokens
    for temperature in (0.0, 1.0):
        seeds = range(args.seeds if temperature > 0 else 1)

        def base(ids, seed):
            return ms.generate(target, ids, n, temperature=temperature, seed=seed)
        band = noise_band(lambda: base(ids_list[0], 0), args.repeats)
        out += ["", f"## Temperature {temperature:g}", "",
                f"noise band +-{band:.0%} (autoregressive decoding timed against itself, now)", "",
                "| drafter | gamma | tokens/call | speedup (median, min-max) | verdict |",
                "|---|---|---|---|---|"]
        print("\n".join(out[-6:]), flush=True)
        for name, (make, gamma) in methods(draft, args.width, args.depth).items():
            drafter, ratios, tpc = make(), [], []
            for seed in seeds:
                for i, ids in enumerate(ids_list):
                    def run():
                        return ms.speculative_generate(target, drafter, ids, n, gamma=gamma,
                                                       temperature=temperature, seed=100 * seed + i)
                    if seed == 0:  # timed, paired with the same prompt and seed decoded plainly
                        ar, res, t_ar, t_res = paired(lambda: base(ids, i), run, args.repeats)
                        ratios.append(t_ar / t_res)
                        assert temperature > 0 or res.tokens == ar.tokens, f"{name}: not greedy"
                    else:
                        res = run()
                    tpc.append(res.stats.tokens_per_call)
            out.append(f"| {name} | {gamma} | {statistics.mean(tpc):.2f} | {spread(ratios)} | "
                       f"{', '.join(timing_agreement(ratios, band))} |")
            print(out[-1], flush=True)


@torch.inference_mode()
def keep_chances(target, draft, out, windows=16, block=256):
    """Per position of the held-out text at T = 1: P(keep) of the draft's argmax as a guess, p(x),
    and of a draft sampled from q, 1 - TV(p, q); by the target's max p."""
    data = heldout()
    step = (len(data) - block) // windows
    x = torch.stack([data[w * step:w * step + block] for w in range(windows)])  # (B, T)
    p = torch.softmax(target(x).double(), -1).flatten(0, 1)  # (B * T, V)
    q = torch.softmax(draft(x).double(), -1).flatten(0, 1)
    guess = p.gather(1, q.argmax(1, keepdim=True))[:, 0]  # p(argmax q)
    sample = torch.minimum(p, q).sum(1)  # 1 - TV(p, q)
    top = p.max(1).values
    out += ["", "## Why guesses lose at T = 1: the chance one drafted token is kept", "",
            f"Along the held-out text ({windows} windows of {block} bytes): a guess x (the draft's "
            "argmax) is kept with probability p(x); a token sampled from q with probability "
            "min(1, p/q), on average 1 - TV(p, q).", "",
            "| positions | share | guess kept, mean p(argmax q) | sample kept, mean 1 - TV(p, q) |",
            "|---|---|---|---|"]
    for label, where in (("all", top >= 0), ("target peaked, max p >= 0.8", top >= 0.8),
                         ("target spread, max p < 0.5", top < 0.5)):
        out.append(f"| {label} | {float(where.double().mean()):.2f} | "
                   f"{float(guess[where].mean()):.3f} | {float(sample[where].mean()):.3f} |")
    print("\n".join(out[-7:]), flush=True)


def tiny_gpt(seed, n_layer, vocab_size=8, std=0.5):
    """A random float64 GPT with peaked next-token laws (as tests/conftest.py builds them)."""
    model = ms.GPT(ms.GPTConfig(vocab_size=vocab_size, n_layer=n_layer, n_head=2, n_embd=32,
                                block_size=32))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, w in model.named_parameters():
            if "ln_" in name:
                w.copy_(float(name.endswith("weight")) + 0.1 * torch.randn(w.shape, generator=g))
            else:
                w.normal_(0.0, std, generator=g)
    return model.double().eval()


RULES = {"lossless (multi_draft_accept)": multi_draft_accept,
         "typical acceptance (Medusa)": typical_accept,
         "top-k, k = 1": functools.partial(topk_accept, k=1),
         "top-k, k = 2": functools.partial(topk_accept, k=2),
         "top-k, k = 4": functools.partial(topk_accept, k=4)}


def shortcut_rows(target, draft, args, out):
    small, small_draft = tiny_gpt(1, 2), tiny_gpt(2, 1)
    want = target_law(small, [1, 2], 3)
    d = BeamDrafter(small_draft, 3, 3)
    first = d.draft([1, 2], 4).tokens[0]  # the best beam's first token: the first guess at the root
    ids_list = prompts(args.prompts)
    out += ["", "## The top-k shortcut next to typical acceptance", "",
            "TV: total variation distance of the loop's exact law of 3 new tokens from the "
            "target's (float64, vocabulary 8, BeamDrafter(width 3, depth 3), gamma 4, T = 1); "
            f"P(x1 = g): the law's chance that the first token is the first guess g (the target's: "
            f"{float(want.sum((1, 2))[first]):.3f}). Tokens per call: the shipped pair, beam "
            f"{args.width} x {args.depth} with gamma {2 * args.depth}, T = 1, {args.prompts} "
            f"prompts x {args.seeds} seeds.", "",
            "| rule | TV from the target's law | P(x1 = g) | tokens/call (shipped pair) |",
            "|---|---|---|---|"]
    print("\n".join(out[-5:]), flush=True)
    for name, rule in RULES.items():
        law = dense(exact_law(lambda: tuple(ms.speculative_generate(
            small, BeamDrafter(small_draft, 3, 3), [1, 2], 3, gamma=4, temperature=1.0,
            rule=rule).tokens)), 8, 3)
        tv = 0.5 * float((law - want).abs().sum())
        beam = BeamDrafter(draft, args.width, args.depth)
        tpc = [ms.speculative_generate(target, beam, ids, args.max_new_tokens, gamma=2 * args.depth,
                                       temperature=1.0, seed=100 * s + i,
                                       rule=rule).stats.tokens_per_call
               for s in range(args.seeds) for i, ids in enumerate(ids_list)]
        shown = "below 1e-12" if tv < 1e-12 else f"{tv:.3f}"
        out.append(f"| {name} | {shown} | {float(law.sum((1, 2))[first]):.3f} | "
                   f"{statistics.mean(tpc):.2f} |")
        print(out[-1], flush=True)
    out += ["", "A lossy rule keeps the first guess whenever it passes its test, whatever p says; "
            "where the first guess always passes (typical acceptance, top-k with k >= 2 on this "
            "toy), the first token is that guess with probability 1 and the two rules' laws "
            "coincide."]


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=64)
    ap.add_argument("--seeds", type=count, default=3, help="seeds per prompt at T = 1")
    ap.add_argument("--width", type=count, default=4, help="beams kept per step")
    ap.add_argument("--depth", type=count, default=4, help="tokens per beam")
    ap.add_argument("--repeats", type=count, default=2,
                    help="runs of each side per prompt; the best time counts")
    ap.add_argument("--out", type=out_folder, default=FIGURES,
                    help="the folder search_drafts.md is written to (default: figures/)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny models: one thread is about as fast, and steadier when shared
    t0 = time.perf_counter()
    target, draft = ms.load_model("target"), ms.load_model("draft")
    out = ["# Search-based drafts: draft beam search as a tree of guesses (survey 3.1.2)", "",
           f"python benchmarks/search_drafts.py --prompts {args.prompts} --max-new-tokens "
           f"{args.max_new_tokens} --seeds {args.seeds} --width {args.width} --depth "
           f"{args.depth} --repeats {args.repeats}", "",
           f"{args.prompts} held-out prompts, {args.max_new_tokens} new tokens, torch threads "
           f"{torch.get_num_threads()}. Speedups: paired with autoregressive decoding of the same "
           "prompt and seed, best of the repeats, the median per-prompt ratio (min-max); the "
           "machine may be shared, so read them against the noise band."]
    print("\n".join(out), flush=True)
    decode_rows(target, draft, args, out)
    keep_chances(target, draft, out)
    shortcut_rows(target, draft, args, out)
    out += ["", f"(ran in {time.perf_counter() - t0:.0f} s)"]
    args.out.mkdir(exist_ok=True)
    (args.out / "search_drafts.md").write_text("\n".join(out) + "\n")
    print(f"wrote {args.out / 'search_drafts.md'}")


if __name__ == "__main__":
    main()

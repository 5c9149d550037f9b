"""python -m minispec "def fib(n):" [--drafter NAME]: speculative decoding on the shipped models.

Prints the speculative continuation (kept drafts, corrections and bonus tokens in color), then a
table on the same prompt, in the same run: autoregressive decoding, the plain draft model, the
chosen drafter (one row if it is the plain draft), and the best shipped combination (prompt lookup
where the context repeats, else the distilled draft stopped at its first unsure token). Each row is
timed against autoregressive decoding with kit.timing.paired (alternating runs, best of --repeats),
and its verdict is read against a noise band measured first, in the same run: autoregressive
decoding timed against itself (kit.timing.noise_band).
"""
import argparse
import functools

import torch

from ..drafters import ModelDrafter, PromptLookupDrafter
from ..methods import FallbackDrafter, load_drafter
from ..model import encode, load_model
from ..speculate import generate, speculative_generate
from . import timing
from .viz import ansi_trace

NAMES = ["draft", "draft_distilled", "draft_onpolicy", "lookup", "early_exit", "medusa", "hydra",
         "eagle"]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m minispec", description="Speculative decoding.")
    ap.add_argument("prompt", nargs="?", default="def fibonacci(n):\n    ")
    ap.add_argument("--drafter", default="draft", choices=NAMES, help="a shipped drafting method")
    ap.add_argument("--gamma", type=int, default=4, help="drafted tokens scored per target call")
    ap.add_argument("--temperature", type=float, default=0.8,
                    help="0 = greedy (these small byte models then tend to fall into runs of "
                         "spaces); "
                         "sampling is lossless, reproducible with --seed")
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--max-new-tokens", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed runs of each side of a pair (the best counts)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (tiny models gain little from more, and on a busy "
                         "machine extra threads wait on each other)")
    ap.add_argument("--show-rejected", action="store_true",
                    help="also print rejected drafts (struck through)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, ids = load_model("target"), encode(args.prompt)
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
              top_p=args.top_p, seed=args.seed, crop_prompt=True)
    unsure_draft = ModelDrafter(load_model("draft_distilled"), threshold=0.5)
    best = FallbackDrafter(PromptLookupDrafter(4, 3), unsure_draft, 8)
    chosen = "plain draft" if args.drafter == "draft" else args.drafter
    runs = {"plain draft": (load_drafter("draft", target), args.gamma),
            chosen: (load_drafter(args.drafter, target), args.gamma),
            "lookup, else draft": (best, 16)}  # name -> (drafter, gamma)
    autoregressive = functools.partial(generate, target, ids, **kw)
    for d, g in runs.values():  # warm up
        speculative_generate(target, d, ids, gamma=g, **dict(kw, max_new_tokens=8))
    band = timing.noise_band(autoregressive, repeats=args.repeats, pairs=2)  # A/A, this run
    res, ar, t_ar, rows = {}, {}, [], []
    for name, (d, g) in runs.items():  # each against autoregressive runs alternating with it
        method = functools.partial(speculative_generate, target, d, ids, gamma=g, **kw)
        ar[name], res[name], t_base, t_method = timing.paired(autoregressive, method, args.repeats)
        t_ar.append(t_base)
        rows.append((name, g, res[name], len(res[name].tokens) / t_method, t_base / t_method))
    print(args.prompt + ansi_trace(res[chosen].steps, args.show_rejected))
    plain = ar["plain draft"]
    rows.insert(0, ("autoregressive", "", plain, len(plain.tokens) / min(t_ar), None))
    print(f"\n{'':20}{'gamma':>6}{'tokens/s':>10}{'target calls':>14}{'tokens/call':>13}"
          f"{'speedup':>9}  verdict")
    for name, gamma, r, tps, ratio in rows:
        judged = f"{ratio:8.2f}x  {timing.verdict(ratio, band)}" if ratio else f"{1:8.2f}x"
        print(f"{name:20}{gamma:>6}{tps:10.1f}{r.stats.target_calls:14d}"
              f"{r.stats.tokens_per_call:13.2f}{judged}")
    print(f"(speedup: best of {args.repeats} runs alternating with autoregressive decoding's;\n"
          f" verdict: against the noise band +-{band:.0%}, autoregressive decoding timed against "
          "itself in this run;\n one prompt: benchmarks/ time many)")
    if args.temperature == 0:
        same = all(res[name].tokens == ar[name].tokens for name in res)
        print("identical to autoregressive greedy output:", same)


if __name__ == "__main__":
    main()

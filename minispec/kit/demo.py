"""python -m minispec "def fib(n):" [--drafter NAME]: speculative decoding on the shipped models.

Prints the speculative continuation (kept drafts, corrections and bonus tokens in color), then a
table on the same prompt, in the same run: autoregressive decoding, the plain draft model, the
chosen drafter, and the best shipped combination (prompt lookup where the context repeats, else
the distilled draft stopped at its first unsure token).
"""
import argparse

from ..drafters import ModelDrafter, PromptLookupDrafter
from ..methods import FallbackDrafter, load_drafter
from ..model import encode, load_model
from ..speculate import generate, speculative_generate
from .viz import ansi_trace

NAMES = ["draft", "draft_distilled", "lookup", "early_exit", "medusa", "hydra", "eagle"]


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
    ap.add_argument("--show-rejected", action="store_true",
                    help="also print rejected drafts (struck through)")
    args = ap.parse_args(argv)
    target, ids = load_model("target"), encode(args.prompt)
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
              top_p=args.top_p, seed=args.seed, crop_prompt=True)
    unsure_draft = ModelDrafter(load_model("draft_distilled"), threshold=0.5)
    best = FallbackDrafter(PromptLookupDrafter(4, 3), unsure_draft, 8)
    runs = {"plain draft": (load_drafter("draft", target), args.gamma),
            args.drafter: (load_drafter(args.drafter, target), args.gamma),
            "lookup, else draft": (best, 16)}
    res, ar = {}, {}
    for name, (d, g) in runs.items():  # each right after an autoregressive run: paired timings
        speculative_generate(target, d, ids, gamma=g, **dict(kw, max_new_tokens=8))  # warm up
        ar[name] = generate(target, ids, **kw)
        res[name] = speculative_generate(target, d, ids, gamma=g, **kw)
    print(args.prompt + ansi_trace(res[args.drafter].steps, args.show_rejected))
    rows = [("autoregressive", "", ar["plain draft"].stats, 1.0)]  # one token per target call
    for name, r in res.items():
        rows.append((name, runs[name][1], r.stats, ar[name].stats.wall_time / r.stats.wall_time))
    print(f"\n{'':22}{'gamma':>6}{'tokens/s':>10}{'target calls':>14}{'tokens/call':>13}"
          f"{'speedup':>9}")
    for name, gamma, s, speedup in rows:
        print(f"{name:22}{gamma:>6}{s.tokens_per_second:10.1f}{s.target_calls:14d}"
              f"{s.tokens_per_call:13.2f}{speedup:8.2f}x")
    print("(speedup: against the autoregressive run just before it; one prompt: noisy, see "
          "benchmarks/)")
    if args.temperature == 0:
        same = all(res[name].tokens == ar[name].tokens for name in res)
        print("identical to autoregressive greedy output:", same)


if __name__ == "__main__":
    main()

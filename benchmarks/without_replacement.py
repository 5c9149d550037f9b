"""python benchmarks/without_replacement.py -- sampled trees: iid siblings against distinct ones.

    python benchmarks/without_replacement.py [--prompts 8] [--seeds 2] [--max-new-tokens 96]

At temperature 1, each tree shape is drafted twice on the same prompts and seeds: siblings drawn iid
from q (verified by SpecInfer's rule) and drawn without replacement (replacement=False, verified by
recursive rejection sampling, RSD). Both are lossless (tests/test_without_replacement.py); what
differs is how many tokens a target call keeps. Per shape: tokens per call, the share of rounds that
keep at least one draft, distinct nodes per round, and the paired difference (distinct - iid) of
tokens per call over the runs with its standard error. No timing: a tree of the same shape costs the
same target call either way (distinct siblings fill it, so it can hold more nodes).
Writes figures/without_replacement.md.
"""
import math
import statistics
from pathlib import Path

from minispec import ModelDrafter, load_model, speculative_generate
from minispec.kit.data import prompts
from minispec.methods import EagleDrafter, load_eagle
from common import count, out_folder, parser  # benchmarks/common.py

FIGURES = Path(__file__).resolve().parent.parent / "figures"
SHAPES = {"model draft (2, 1, 1)": dict(branching=(2, 1, 1)),
          "model draft (3, 1, 1)": dict(branching=(3, 1, 1)),
          "model draft (2, 2, 1)": dict(branching=(2, 2, 1)),
          "EAGLE (3, 3, 3), width 2": dict(branching=(3, 3, 3), width=2)}


def run(n_prompts, seeds, n, out=FIGURES):
    target, draft = load_model("target"), load_model("draft")
    head = load_eagle(target)
    ids_list = prompts(n_prompts)
    lines = [f"# Sampled trees, iid against distinct siblings (T = 1; {n_prompts} prompts x "
             f"{seeds} seeds, {n} new tokens)", "",
             "| tree | siblings | tokens/call | rounds keeping >= 1 | nodes/round | "
             "distinct - iid, tokens/call |", "|---|---|---|---|---|---|"]
    for name, shape in SHAPES.items():
        gamma = sum(math.prod(shape["branching"][:d + 1]) for d in range(len(shape["branching"])))
        per_run = {}
        for replacement in (True, False):
            source, kind = (head, EagleDrafter) if "EAGLE" in name else (draft, ModelDrafter)
            res = [speculative_generate(target, kind(source, replacement=replacement, **shape), ids,
                                        n, gamma=gamma, temperature=1.0, seed=100 * s + i)
                   for s in range(seeds) for i, ids in enumerate(ids_list)]
            steps = [st for r in res for st in r.steps if st.tree.tokens]
            per_run[replacement] = [r.stats.tokens_per_call for r in res]
            row = (f"| {name} | {'iid' if replacement else 'distinct'} | "
                   f"{statistics.mean(per_run[replacement]):.2f} | "
                   f"{sum(st.accepted >= 1 for st in steps) / len(steps):.2f} | "
                   f"{sum(len(st.tree.tokens) for st in steps) / len(steps):.1f} |")
            if replacement:
                lines.append(row + " |")
            else:
                d = [b - a for a, b in zip(per_run[True], per_run[False])]
                se = statistics.stdev(d) / len(d) ** 0.5
                lines.append(row + f" {statistics.mean(d):+.2f} +- {se:.2f} over {len(d)} runs |")
            print(lines[-1], flush=True)
    out.mkdir(exist_ok=True)
    (out / "without_replacement.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'without_replacement.md'}")


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--seeds", type=count, default=2)
    ap.add_argument("--max-new-tokens", type=count, default=96)
    ap.add_argument("--out", type=out_folder, default=FIGURES,
                    help="the folder without_replacement.md is written to (default: figures/)")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.seeds < 1 or args.prompts * args.seeds < 2:
        ap.error(f"the spread of the difference needs 2 runs or more: --prompts x --seeds = "
                 f"{args.prompts} x {args.seeds}")
    run(args.prompts, args.seeds, args.max_new_tokens, args.out)


if __name__ == "__main__":
    main()

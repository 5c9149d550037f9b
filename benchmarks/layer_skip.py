"""python benchmarks/layer_skip.py -- skipping middle blocks against exiting early, shipped target.

    python benchmarks/layer_skip.py [--prompts 4] [--max-new-tokens 64] [--repeats 2]

1. Top-1 agreement a(S) with the full model on the held-out prompts' own tokens (8 prompts of 128
   bytes; minispec.methods.layer_skip.agreement): for each number m of blocks skipped, every set of
   m middle blocks (the first and last kept) and early exit at the same compute (the last m blocks
   skipped: N - m blocks run per draft step either way). Deterministic.
2. What the search (search_skip, default objective, gamma 4) picks on each prompt.
3. Decoding through the one loop, gamma 4, at T = 0 (greedy: checked equal to generate) and T = 1:
   the best middle set of each size (by mean a(S) in part 1), early exit at the same compute, and
   the searched drafter; tokens per target call, kept fraction and the paired speedup against
   generate (minispec.kit.timing: alternating, best of --repeats; median over prompts with min-max;
   verdict against a noise band from generate timed against itself). Writes figures/layer_skip.md.
"""
import datetime
import itertools
import statistics
from collections import Counter
from pathlib import Path

import torch

import minispec as ms
from minispec.kit.data import prompts as held_prompts
from minispec.methods import EarlyExitDrafter, LayerSkipDrafter
from minispec.methods.layer_skip import agreement, check_search, search_skip

from common import count, noise_band, out_folder, paired, parser, spread, timed
from minispec.kit.timing import agreement as timing_agreement
from minispec.kit.timing import step_cost

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def agreement_table(target, ids_list):
    """-> {m: (best middle set, its mean a, worst set, its mean a, early exit's mean a)}."""
    N = target.config.n_layer
    rows = {}
    for m in range(1, N - 1):
        sets = list(itertools.combinations(range(1, N - 1), m)) + [tuple(range(N - m, N))]
        per_prompt = [agreement(target, ids, sets) for ids in ids_list]
        mean = [statistics.mean(col) for col in zip(*per_prompt)]
        middle = dict(zip(sets[:-1], mean[:-1]))
        best = max(middle, key=middle.get)
        worst = min(middle, key=middle.get)
        rows[m] = (best, middle[best], worst, middle[worst], mean[-1])
    return rows


def decode(target, drafter, ids_list, n, temperature, repeats):
    """-> (tokens per call, kept fraction, per-prompt speedups, all greedy outputs equal)."""
    ratios, tokens, calls, kept, drafted, same = [], 0, 0, 0, 0, True
    for i, ids in enumerate(ids_list):
        kw = dict(max_new_tokens=n, temperature=temperature, seed=i)
        ar, res, t_ar, t_res = paired(lambda: ms.generate(target, ids, **kw),
                                      lambda: ms.speculative_generate(target, drafter, ids,
                                                                      gamma=4, **kw), repeats)
        ratios.append(t_ar / t_res)
        tokens += len(res.tokens)
        calls += res.stats.target_calls
        kept += sum(s.accepted for s in res.steps)
        drafted += res.stats.drafted
        same = same and res.tokens == ar.tokens
    return tokens / calls, kept / max(drafted, 1), ratios, same


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=4)
    ap.add_argument("--max-new-tokens", type=count, default=64)
    ap.add_argument("--repeats", type=count, default=2)
    ap.add_argument("--out", type=out_folder, default=FIGURES,
                    help="the folder layer_skip.md is written to (default: figures/)")
    args = ap.parse_args(argv)
    if args.prompts < 1:  # an IndexError at the timing before
        ap.error(f"--prompts must be >= 1, got {args.prompts}")
    torch.set_num_threads(1)
    target = ms.load_model("target")
    N = target.config.n_layer
    ids_list = held_prompts(8)
    out = [f"# Layer skipping on the shipped {N}-block target (python benchmarks/layer_skip.py, "
           f"{datetime.date.today()}, torch threads 1)", "",
           "## 1. Top-1 agreement with the full model on the prompts' own tokens",
           "", f"{len(ids_list)} held-out prompts of 128 bytes (minispec.kit.data.prompts(8)); "
           f"blocks numbered 0..{N - 1}; a draft step runs N - m blocks either way.", "",
           "| blocks skipped m | best middle set | its agreement | worst middle set | "
           "its agreement | early exit at the same compute (skip) | its agreement |",
           "|---|---|---|---|---|---|---|"]
    table = agreement_table(target, ids_list)
    for m, (best, a_best, worst, a_worst, a_exit) in table.items():
        out.append(f"| {m} | {set(best)} | {a_best:.3f} | {set(worst)} | {a_worst:.3f} | "
                   f"early exit k={N - m}, S = {set(range(N - m, N))} | {a_exit:.3f} |")
    print("\n".join(out), flush=True)
    picks = Counter(search_skip(target, ids)[0] for ids in ids_list)
    step = step_cost(target, 1, context=128)  # one cached step: no prompt's forward spread in it
    cost = statistics.median(min(timed(lambda: search_skip(target, ids))[1] for _ in range(2))
                             for ids in ids_list) / step
    out += ["", "## 2. What the search picks (default objective: expected speedup, gamma 4, "
            f"max_skip {check_search(N)})", "",
            ", ".join(f"{set(s)} on {c} of {len(ids_list)} prompts"
                      for s, c in picks.most_common())
            + f". One search (the full model and each set tried, over the 128-byte prompt) took "
            f"{cost:.0f} autoregressive steps of this target (median over the prompts, best of 2)."]
    print(out[-1], flush=True)
    runs = ids_list[:args.prompts]
    band = noise_band(lambda: ms.generate(target, runs[0], args.max_new_tokens), args.repeats)
    out += ["", f"## 3. Decoding, gamma 4, {len(runs)} prompts x {args.max_new_tokens} new "
            f"tokens (paired with generate, best of {args.repeats}; noise band +-{band:.0%})", "",
            "| T | drafter | blocks run per draft step | tokens/call | kept fraction | "
            "speedup, median (min-max) | verdict | same as greedy |",
            "|---|---|---|---|---|---|---|---|"]
    drafters = {}
    for m, (best, *_) in table.items():
        drafters[f"skip {set(best)}"] = (LayerSkipDrafter(target, best), N - m)
        drafters[f"early exit k={N - m}"] = (EarlyExitDrafter(target, N - m), N - m)
    drafters["searched on each prompt"] = (LayerSkipDrafter(target), None)
    for temperature in (0.0, 1.0):
        for name, (drafter, run) in drafters.items():
            tpc, kept, ratios, same = decode(target, drafter, runs, args.max_new_tokens,
                                             temperature, args.repeats)
            out.append(f"| {temperature:g} | {name} | {run or 'per prompt'} | {tpc:.2f} | "
                       f"{kept:.2f} | {spread(ratios)} | "
                       f"{', '.join(timing_agreement(ratios, band))} | "
                       f"{same if temperature == 0 else '-'} |")
            print(out[-1], flush=True)
    wins = [m for m, row in table.items() if row[1] > row[4]]
    out += ["", "## What the 6-block scale allows", "",
            f"Skipping a middle set agreed with the full model more often than exiting early at "
            f"the same compute for m in {wins or 'none'} of 1..{N - 2} (part 1). This target has "
            f"only {N - 2} middle blocks, so skipping one saves 1/{N} of a step, and it was "
            "trained with LayerSkip's early-exit loss (scripts/train.py, early_exit=True; "
            "minispec.kit.training.early_exit_loss), which trains every exit h_k to suit the final "
            "norm and head: nothing trained it to tolerate a missing middle block. Early exit also "
            "verifies more cheaply here: it reuses blocks 0..k-1 for the drafted tokens, while "
            "layer skipping reuses only the blocks before its first skipped one and recomputes the "
            "later blocks it ran. Layer skipping is meant for deep models whose middle layers "
            "change the residual stream little; "
            "the 30-layer SmolLM2 (minispec.bridge.smollm2) is where it can be tried at depth. "
            f"The searched drafter pays its search (part 2: about {cost:.0f} steps) once per "
            f"prompt, which {args.max_new_tokens} new tokens do not earn back here. "
            "At T = 0 this tiny target's greedy text falls into loops, which flatter every "
            "drafter: read T = 1. Speedups are timed on a shared 2-core CPU: read the spread and "
            "the verdict, not the median alone."]
    args.out.mkdir(exist_ok=True)
    (args.out / "layer_skip.md").write_text("\n".join(out) + "\n")
    print(f"wrote {args.out / 'layer_skip.md'}")


if __name__ == "__main__":
    main()

"""EAGLE against the best Hydra heads and against today's best combination, held-out code prompts.

    python benchmarks/eagle.py [--prompts 8] [--max-new-tokens 100] [--gammas 4 6 8]
                               [--temperatures 0 1] [--repeats 3]

For each temperature, every method decodes each prompt alternately with plain autoregressive
decoding of the same prompt, each side timed as the best of --repeats runs (benchmarks/common.py);
the speedup is the median of these per-prompt ratios, with their spread. Methods at equal gamma
(drafted tokens the target scores per call): Hydra heads on the static tree picked from their
held-out accuracies (medusa_tree, HeadDrafter's default) and EAGLE, as a chain (its default) and
with EAGLE-2 dynamic trees; then the best combination before EAGLE (prompt lookup where the
context repeats, else the distilled draft stopped at its first unsure token) side by side with
lookup, else EAGLE (its gammas chosen on 10 other held-out prompts). At temperature 0 every output
is checked against greedy decoding. Writes nothing: copy the output into figures/eagle.md.
"""
import statistics
import sys
from pathlib import Path

import torch

import minispec as ms
from minispec.kit.data import prompts as held_prompts
from minispec.methods import EagleDrafter, load_eagle, medusa_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from train_heads import head_accuracy  # noqa: E402

from common import count, paired, parser, spread, temperature  # noqa: E402  (benchmarks/common.py)


def measure(target, name, drafter, gamma, prompts, n, temperature, repeats=3):
    ratios, calls, toks = [], 0, 0
    for i, ids in enumerate(prompts):
        kw = dict(max_new_tokens=n, temperature=temperature, seed=i)
        ar, res, t_ar, t_res = paired(
            lambda: ms.generate(target, ids, **kw),
            lambda: ms.speculative_generate(target, drafter, ids, gamma=gamma, **kw), repeats)
        assert temperature > 0 or res.tokens == ar.tokens, f"{name}: output differs from greedy"
        ratios.append(t_ar / t_res)
        calls, toks = calls + res.stats.target_calls, toks + len(res.tokens)
    row = dict(tokens_per_call=toks / calls, speedup=statistics.median(ratios))
    print(f"| {name} | {gamma} | {row['tokens_per_call']:.2f} | {spread(ratios)} |", flush=True)
    return row


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=100)
    ap.add_argument("--gammas", type=count, nargs="+", default=[4, 6, 8])
    ap.add_argument("--temperatures", type=temperature, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--repeats", type=count, default=3,
                    help="runs of each side per prompt; the best time counts")
    ap.add_argument("--branching", type=count, nargs="+", default=[4] * 8,
                    help="EAGLE-2 children per depth")
    ap.add_argument("--width", type=count, default=4, help="EAGLE-2 nodes expanded per depth")
    ap.add_argument("--score-temperature", type=float, default=0.5,
                    help="EAGLE-2 node scores: softmax(logits / t)")
    args = ap.parse_args(argv)
    target = ms.load_model("target")
    hydra, head = ms.load_heads(target, "hydra"), load_eagle(target)
    distilled, prompts = ms.load_model("draft_distilled"), held_prompts(args.prompts)
    n = args.max_new_tokens
    eagle = EagleDrafter(head)
    tree = EagleDrafter(head, tuple(args.branching), args.width, args.score_temperature)
    print(f"{len(prompts)} held-out prompts, {n} new tokens, torch threads "
          f"{torch.get_num_threads()}; EAGLE held-out top-1 accuracy by depth "
          + " / ".join(f"{a:.3f}" for a in head.accuracy or []))
    others = [ids + ms.generate(target, ids, n).tokens
              for ids in held_prompts(10, offset=args.prompts)]
    greedy_acc = head_accuracy(target, hydra, others)  # along greedy runs of 10 other prompts
    ms.generate(target, prompts[0], 16)  # warm up
    for temp in args.temperatures:
        print(f"\ntemperature {temp}\n| method | gamma | tokens/call | speedup (median, min-max) |"
              "\n|---|---|---|---|")
        rows = {}

        def row(name, drafter, gamma):
            return measure(target, name, drafter, gamma, prompts, n, temp, args.repeats)

        for g in args.gammas:
            rows["hydra", g] = max(
                row("Hydra tree (medusa_tree of its held-out accuracies)",
                    ms.HeadDrafter(hydra), g),
                row("Hydra tree (fitted on greedy runs of 10 other prompts)",
                    ms.HeadDrafter(hydra, medusa_tree(greedy_acc, g)), g),
                key=lambda r: r["tokens_per_call"])
            rows["eagle", g] = row("EAGLE chain (the default)", eagle, g)
            rows["tree", g] = row(f"EAGLE-2 tree, top-{args.branching[0]} of {args.width} per "
                                  f"depth, scores at t = {args.score_temperature}", tree, g)
        best_before = ms.FallbackDrafter(ms.PromptLookupDrafter(4, 3),
                                         ms.ModelDrafter(distilled, threshold=0.5), 8)
        # tuned on 10 other prompts
        with_eagle = ms.FallbackDrafter(ms.PromptLookupDrafter(4, 3), eagle, 6)
        rows["before"] = row("lookup (n>=3, gamma=16) else distilled draft (gamma<=8, stop < 0.5)",
                             best_before, 16)
        rows["with"] = row("lookup (n>=3, gamma=12) else EAGLE chain (gamma=6)", with_eagle, 12)
        for g in args.gammas:
            hydra_tpc = rows["hydra", g]["tokens_per_call"]
            print(f"gamma {g}: EAGLE chain / best Hydra tree tokens per call "
                  f"{rows['eagle', g]['tokens_per_call'] / hydra_tpc:.2f}x, EAGLE-2 tree / Hydra "
                  f"{rows['tree', g]['tokens_per_call'] / hydra_tpc:.2f}x")
        ratio = rows["with"]["speedup"] / rows["before"]["speedup"]
        print(f"combination with EAGLE / before: {ratio:.2f}x (median speedups)")


if __name__ == "__main__":
    main()

"""Self-speculation against autoregressive decoding on held-out code prompts.

    python benchmarks/self_speculation.py [--prompts 8] [--max-new-tokens 100] [--temperatures 0 1]
                                          [--repeats 3] [--only WORD ...]

Every method (early exit at each depth k, Medusa and Hydra heads (chains and static trees), EAGLE
(chains and EAGLE-2 dynamic trees) when eagle_head.pt is there, Jacobi, lookahead, and the separate
draft model for reference) runs through the one loop, ms.speculative_generate, and decodes each
prompt alternately with plain autoregressive decoding of the same prompt, each side timed as the
best of --repeats runs (benchmarks/common.py); the speedup is the median of these per-prompt
ratios (with the lowest and highest: per-prompt ratios spread widely). At temperature 0 each
output is checked against greedy decoding ("same as greedy"). Head trees are
picked by medusa_tree from head accuracies: the held-out ones stored with the heads
(teacher-forced on corpus text), or ones measured along greedy continuations of 10 other held-out
prompts ("fitted on greedy runs"), where greedy decoding's easy runs make top-1 guesses reliable.
"""
import statistics
import sys
from pathlib import Path

import torch

import minispec as ms
from minispec.kit.data import prompts as held_prompts
from minispec.methods import EarlyExitDrafter, HeadDrafter, Lookahead, load_heads, medusa_tree
from minispec.model import WEIGHTS_DIR
from minispec.kit.timing import step_costs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from train_heads import head_accuracy  # noqa: E402

from common import count, paired, parser, spread, temperature  # noqa: E402  (benchmarks/common.py)


def compare(target, methods, prompts, max_new_tokens=64, temperature=0.0, repeats=3):
    """methods: name -> (drafter, gamma). The speedup: median per-prompt ratio to generate()
    (common.paired)."""
    rows = {}
    for name, (drafter, gamma) in methods.items():
        ratios, kept, drafted, calls, toks, same = [], 0, 0, 0, 0, True
        for i, ids in enumerate(prompts):
            kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=i)
            ar, res, t_ar, t_res = paired(
                lambda: ms.generate(target, ids, **kw),
                lambda: ms.speculative_generate(target, drafter, ids, gamma=gamma, **kw), repeats)
            ratios.append(t_ar / t_res)
            kept, drafted = kept + sum(s.accepted for s in res.steps), drafted + res.stats.drafted
            calls, toks = calls + len(res.steps), toks + len(res.tokens)
            same = same and res.tokens == ar.tokens
        rows[name] = dict(kept=kept / drafted if drafted else 0.0, tokens_per_call=toks / calls,
                          speedup=statistics.median(ratios), same_as_greedy=same)
        r = rows[name]
        print(f"| {name} | {gamma} | {r['kept']:.3f} | {r['tokens_per_call']:.2f} | "
              f"{spread(ratios)} | {r['same_as_greedy'] if temperature == 0 else '-'} |",
              flush=True)
    return rows


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=100)
    ap.add_argument("--temperatures", type=temperature, nargs="+", default=[0.0])
    ap.add_argument("--repeats", type=count, default=3,
                    help="runs of each side per prompt; the best time counts")
    ap.add_argument("--only", nargs="*",
                    help="run only methods whose name contains one of these words (any case)")
    args = ap.parse_args(argv)
    target, draft = ms.load_model("target"), ms.load_model("draft")
    N = target.config.n_layer
    # one entry per (k, gamma): the gamma is part of the name
    methods = {f"early exit k={k}, gamma={g}": (EarlyExitDrafter(target, k), g)
               for k in range(1, N) for g in ((1, 2, 3, 4) if k <= 2 else (2, 4))}
    methods |= {f"early exit k={k}, gamma<=8, stop below confidence {t}":
                (EarlyExitDrafter(target, k, t), 8)
                for k in (1, 2) for t in (0.3, 0.5, 0.7)}  # Draft & Verify's adaptive draft length
    prompts = held_prompts(args.prompts)
    # head accuracies in the regime of use: along greedy continuations of 10 other held-out prompts
    others = [ids + ms.generate(target, ids, args.max_new_tokens).tokens
              for ids in held_prompts(10, offset=args.prompts)]
    all_heads = {"Medusa": load_heads(target, "medusa"), "Hydra": load_heads(target, "hydra")}
    greedy_accs = {}
    for name, h in all_heads.items():  # Hydra: Medusa heads that read the token before their guess
        greedy_acc = greedy_accs[name] = head_accuracy(target, h, others)
        n_heads = len(h.res)
        methods[f"{name} chain (top-1 of each head)"] = (HeadDrafter(h, [(0,) * n_heads]), n_heads)
        methods |= {f"{name} tree, {s} nodes": (HeadDrafter(h, medusa_tree(h.accuracy, s)), s)
                    for s in ((4, 8, 12) if name == "Medusa" else (8,))}
        methods |= {f"{name} tree, {s} nodes, fitted on greedy runs":
                    (HeadDrafter(h, medusa_tree(greedy_acc, s)), s) for s in (6, 8, 12)}
    if (WEIGHTS_DIR / "eagle_head.pt").exists():
        from minispec.methods.eagle import EagleDrafter, load_eagle
        head = load_eagle(target)
        methods |= {"EAGLE chain": (EagleDrafter(head), 6)}
        methods |= {f"EAGLE-2 tree, top-{k} of {w} per depth, {d} deep, {g} nodes":
                    (EagleDrafter(head, (k,) * d, w), g)
                    for k, w, d, g in ((4, 4, 5, 8), (4, 4, 6, 12), (2, 2, 6, 8), (4, 4, 8, 16))}
    methods |= {"Jacobi W=4": (Lookahead(target, 4, candidates=0), 4),
                "lookahead W=4 N=3 G=3": (Lookahead(target), 10),
                "draft model, gamma=4": (ms.ModelDrafter(draft), 4)}
    if args.only:
        words = [w.lower() for w in args.only]
        if unknown := [w for w in words if not any(w in k.lower() for k in methods)]:
            ap.error(f"--only {unknown} match no method: {list(methods)}")  # was an empty table
        methods = {k: v for k, v in methods.items() if any(w in k.lower() for w in words)}
    ms.generate(target, prompts[0], 16)  # warm up
    t = step_costs(target, (1, 2, 3, 5, 9, 13), reps=40)  # every k in turn
    print(f"{len(prompts)} held-out prompts, {args.max_new_tokens} new tokens, torch threads "
          f"{torch.get_num_threads()}; verify cost v(k) = "
          + ", ".join(f"{k}: {t[k] / t[1]:.2f}" for k in (2, 3, 5, 9, 13)))
    for name, h in all_heads.items():
        print(f"{name} top-1 accuracy per head, held out: "
              + " / ".join(f"{a[0]:.3f}" for a in h.accuracy)
              + "; along greedy runs: " + " / ".join(f"{a[0]:.3f}" for a in greedy_accs[name]))
    for temp in args.temperatures:
        print(f"\ntemperature {temp}\n| method | gamma | kept fraction | tokens/call | "
              "speedup (median, min-max) | same as greedy |\n|---|---|---|---|---|---|")
        compare(target, methods, prompts, args.max_new_tokens, temp, args.repeats)


if __name__ == "__main__":
    main()

"""Self-speculation against autoregressive decoding, temperature 0, held-out code prompts.

    python benchmarks/self_speculation.py [--prompts 8] [--max-new-tokens 100]

Every method (early exit at each depth k, Medusa chain and trees, Hydra (sequential Medusa heads)
chain and trees when hydra_heads.pt is there, Jacobi, lookahead, and the
separate draft model for reference) decodes each prompt right after plain autoregressive
decoding of the same prompt; the speedup is the median of these paired ratios. Each output is
checked against greedy decoding ("same as greedy"). Medusa trees are picked by medusa_tree from
head accuracies: the held-out ones stored with the heads (teacher-forced on corpus text), or ones
measured along greedy continuations of 10 other held-out prompts ("fitted on greedy runs"), where
greedy decoding's easy runs make the top-1 guesses far more reliable and deep chains pay.
"""
import argparse
import statistics

import torch

import minispec as ms
from minispec.bench import bench_prompts, step_cost
from minispec.selfspec import (HYDRA_PATH, EarlyExitDrafter, Lookahead, MedusaDrafter, head_accuracy, load_medusa,
                               medusa_tree, self_speculative_generate)


def compare(target, methods, prompts, max_new_tokens=64, temperature=0.0):
    """methods: name -> fn(ids, **kw) -> Result. The speedup: median ratio to generate() run just before."""
    rows = {}
    for name, fn in methods.items():
        ratios, kept, drafted, calls, toks, same = [], 0, 0, 0, 0, True
        for i, ids in enumerate(prompts):
            kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=i)
            ar, res = ms.generate(target, ids, **kw), fn(ids, **kw)
            ratios.append(ar.stats["wall_time"] / res.stats["wall_time"])
            kept, drafted = kept + sum(s.accepted for s in res.steps), drafted + res.stats.get("drafted", 0)
            calls, toks = calls + len(res.steps), toks + len(res.tokens)
            same = same and res.tokens == ar.tokens
        rows[name] = dict(acceptance=kept / drafted if drafted else 0.0, tokens_per_call=toks / calls,
                          speedup=statistics.median(ratios), same_as_greedy=same)
        r = rows[name]
        print(f"| {name} | {r['acceptance']:.3f} | {r['tokens_per_call']:.2f} | {r['speedup']:.2f}x | "
              f"{r['same_as_greedy']} |", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    args = ap.parse_args(argv)
    target, draft = ms.load_model("target"), ms.load_model("draft")
    heads, N = load_medusa(target), target.config.n_layer
    run = lambda m: lambda ids, **kw: self_speculative_generate(m, ids, **kw)
    methods = {f"early exit k={k}, gamma={g}": run(EarlyExitDrafter(target, k, g))
               for k in range(1, N) for g in ((1, 2, 3, 4) if k <= 2 else (2, 4))}
    methods |= {f"early exit k={k}, gamma<=8, stop below confidence {t}": run(EarlyExitDrafter(target, k, 8, t))
                for k in (1, 2) for t in (0.3, 0.5, 0.7)}  # Draft & Verify's adaptive draft length
    prompts = bench_prompts(args.prompts)
    # head accuracies in the regime of use: along greedy continuations of 10 other held-out prompts
    others = [ids + ms.generate(target, ids, args.max_new_tokens).tokens
              for ids in bench_prompts(args.prompts + 10)[args.prompts:]]
    all_heads = {"Medusa": heads} | ({"Hydra": load_medusa(target, HYDRA_PATH)} if HYDRA_PATH.exists() else {})
    greedy_accs = {}
    for name, h in all_heads.items():  # Hydra: Medusa heads that read the token before their guess
        greedy_acc = greedy_accs[name] = head_accuracy(target, h, others)
        methods[f"{name} chain (top-1 of each head)"] = run(MedusaDrafter(target, h, [(0,) * len(h.res)]))
        methods |= {f"{name} tree, {s} nodes": run(MedusaDrafter(target, h, medusa_tree(h.accuracy, s)))
                    for s in ((4, 8, 12) if name == "Medusa" else (8,))}
        methods |= {f"{name} tree, {s} nodes, fitted on greedy runs": run(MedusaDrafter(
            target, h, medusa_tree(greedy_acc, s))) for s in (6, 8, 12)}
    methods |= {"Jacobi W=4": run(Lookahead(target, 4, candidates=0)), "lookahead W=4 N=3 G=3": run(Lookahead(target)),
                "draft model, gamma=4": lambda ids, **kw: ms.speculative_generate(target, draft, ids, gamma=4, **kw)}
    ms.generate(target, prompts[0], 16)  # warm up
    t1 = step_cost(target, 1)
    print(f"{len(prompts)} held-out prompts, {args.max_new_tokens} new tokens, temperature 0, torch threads "
          f"{torch.get_num_threads()}; verify cost v(k) = "
          + ", ".join(f"{k}: {step_cost(target, k) / t1:.2f}" for k in (2, 3, 5, 9, 13)))
    for name, h in all_heads.items():
        print(f"{name} top-1 accuracy per head, held out: " + " / ".join(f"{a[0]:.3f}" for a in h.accuracy)
              + "; along greedy runs: " + " / ".join(f"{a[0]:.3f}" for a in greedy_accs[name]))
    print("| method | acceptance | tokens/call | speedup (median) | same as greedy |\n|---|---|---|---|---|")
    compare(target, methods, prompts, args.max_new_tokens)


if __name__ == "__main__":
    main()

"""Drafters and token trees against autoregressive decoding, temperature 0, held-out code prompts.

    python benchmarks/drafters_trees.py [--prompts 8] [--max-new-tokens 100] [--budgets 8 16 32 64]
                                        [--repeats 3]

Prints, for every method: tokens per target call, and the wall-time speedup over plain
autoregressive decoding measured in the same run (each prompt decoded alternately with the method,
each side timed as the best of --repeats runs, benchmarks/common.py; the median of these per-prompt
ratios with their spread, and the ratio of total times). Every method's output is checked to
equal the autoregressive greedy output. Then, at equal draft
budgets (drafted tokens verified per target call), tree vs chain tokens per target call, on the
benchmark prompts and on 10 other held-out prompts. Every method runs through the one loop,
ms.speculative_generate, with its drafter. The dynamic trees take the top-4 children of
the 4 most probable nodes per depth and keep the `budget` most probable nodes; their scores use
the draft's logits / t, with t fitted (fit_score_temperature) on 48 calibration prompts from the
held-out files that are neither set. Last, what the best *static* tree could do: at temperature
0 a rank-path tree accepts the longest prefix of the ranks (under the draft) of the target's
greedy tokens, so its tokens per call can be replayed
exactly from those ranks. The tree of `b` rank paths most often seen at round starts on 10 other
held-out prompts is fitted (a few rounds of refitting, as round starts depend on the tree) and
replayed on the benchmark prompts.
"""
import collections
import statistics

import torch

import minispec as ms
from minispec.drafters import ModelDrafter, PromptLookupDrafter
from minispec.kit.data import heldout_files, prompts as bench_prompts
from minispec.methods import FallbackDrafter

from common import count, paired, parser, spread  # benchmarks/common.py


def calibration_prompts(length=128):
    """8 prompts per held-out file, starting at odd sixteenths (the benchmark prompts start at
    quarters)."""
    out = []
    for data in heldout_files():
        starts = [data.index(b"\n", len(data) * k // 16) + 1 for k in range(1, 16, 2)]
        out += [list(data[s:s + length]) for s in starts]
    return out


@torch.inference_mode()
def greedy_draft_logits(target, draft, prompts, max_new_tokens=100):
    """Along the target's greedy continuation of each prompt: the draft's logits before each token
    (n, V) and the tokens (n,), i.e. what a tree must contain at temperature 0. draft: a GPT."""
    logits, tokens = [], []
    for ids in prompts:
        seq = ids + ms.generate(target, ids, max_new_tokens).tokens
        logits.append(draft(torch.tensor([seq]))[0, len(ids) - 1:-1].float())
        tokens.append(torch.tensor(seq[len(ids):]))
    return torch.cat(logits), torch.cat(tokens)


def fit_score_temperature(logits, tokens, grid=(0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5, 2)):
    """Temperature scaling (Guo et al. 2017): the t in `grid` with the lowest cross-entropy of
    `tokens` under softmax(logits / t). One number that makes a draft's confidences honest.
    Example: fit_score_temperature(*greedy_draft_logits(target, draft, prompts))"""
    return min(grid, key=lambda t: float(torch.nn.functional.cross_entropy(logits / t, tokens)))


def tokens_per_call(run, target, prompts, n):
    calls = toks = 0
    for ids in prompts:
        res = run(ids)
        assert res.tokens == ms.generate(target, ids, n).tokens, "output differs from greedy"
        calls, toks = calls + res.stats.target_calls, toks + len(res.tokens)
    return toks / calls


def measure(name, run, target, prompts, n, repeats=3):
    ratios, calls, toks, t_ar, t_m = [], 0, 0, 0.0, 0.0
    for ids in prompts:
        ar, res, ta, tm = paired(lambda: ms.generate(target, ids, n), lambda: run(ids), repeats)
        assert res.tokens == ar.tokens, f"{name}: output differs from greedy decoding"
        ratios.append(ta / tm)
        t_ar, t_m = t_ar + ta, t_m + tm
        calls, toks = calls + res.stats.target_calls, toks + len(res.tokens)
    row = dict(name=name, tokens_per_call=toks / calls, speedup=statistics.median(ratios),
               total=t_ar / t_m)
    print(f"| {name:42} | {row['tokens_per_call']:5.2f} | {spread(ratios)} "
          f"| {row['total']:5.2f}x |", flush=True)
    return row


def draft_ranks(target, draft, prompts, n):
    """For each prompt: the rank under the draft of each greedy token of the target (0: its
    top-1)."""
    out = []
    for ids in prompts:
        logits, tokens = greedy_draft_logits(target, draft, [ids], n)  # (n, V), (n,)
        out.append((logits > logits.gather(1, tokens[:, None])).sum(1).tolist())
    return out


def replay(ranks, tree):
    """Tokens per target call of a static rank-path tree (a set of rank tuples), and the round
    starts."""
    calls, toks, starts = 0, 0, []
    for r in ranks:
        i = 0
        while i < len(r):
            starts.append((r, i))
            m = 0
            while i + m < len(r) - 1 and tuple(r[i:i + m + 1]) in tree:
                m += 1
            i, calls = i + m + 1, calls + 1
        toks += len(r)
    return toks / calls, starts


def fit_static_tree(ranks, b, rounds=8):
    """The b rank paths seen most often from the round starts (refitted `rounds` times), best of
    all fits."""
    tree, best = {(0,) * k for k in range(1, b + 1)}, (0.0, None)
    for _ in range(rounds):
        count = collections.Counter(tuple(r[i:i + m]) for r, i in replay(ranks, tree)[1]
                                    for m in range(1, min(64, len(r) - i) + 1))
        # a prefix is never rarer than its path: the b most common paths make a tree
        tree = set(sorted(count, key=lambda p: (-count[p], len(p), p))[:b])
        best = max(best, (replay(ranks, tree)[0], tree), key=lambda x: x[0])
    return best[1]


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=100)
    ap.add_argument("--repeats", type=count, default=3,
                    help="runs of each side per prompt; the best time counts")
    ap.add_argument("--budgets", type=count, nargs="+", default=[8, 16, 32, 64])
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    target, draft = ms.load_model("target"), ms.load_model("draft")
    drafts = {"draft": draft, "distilled": ms.load_model("draft_distilled")}
    prompts, n = bench_prompts(args.prompts), args.max_new_tokens
    ms.generate(target, prompts[0], 16)  # warm up
    print(f"{len(prompts)} held-out prompts, {n} new tokens, temperature 0, "
          f"torch threads {torch.get_num_threads()}")
    print(f"| {'method':42} | tok/call | speedup (median, min-max) | speedup (total) |")
    rows = {}

    def method(drafter, gamma):  # ids -> the speculative decode of ids with this drafter
        return lambda ids: ms.speculative_generate(target, drafter, ids, n, gamma=gamma)

    def row(name, run):
        return measure(name, run, target, prompts, n, args.repeats)

    for label, d in drafts.items():
        rows[f"chain {label}"] = row(f"chain, {label}, gamma=4", method(d, 4))
    best = drafts["distilled"]
    rows["lookup"] = row("prompt lookup, gamma=12", method(PromptLookupDrafter(3), 12))
    fallback = FallbackDrafter(PromptLookupDrafter(4, 2), ModelDrafter(best), 4)
    rows["fallback"] = row("lookup (n>=2, gamma=12) else model (gamma=4)", method(fallback, 12))
    confident = FallbackDrafter(PromptLookupDrafter(4, 3), ModelDrafter(best, threshold=0.5), 8)
    rows["fallback conf"] = row("lookup (n>=3, gamma=16) else model (gamma<=8, stop < 0.5)",
                                method(confident, 16))
    rows["static"] = row("static tree (3, 2, 1), 15 nodes",
                         method(ModelDrafter(draft, branching=(3, 2, 1)), 15))
    t = fit_score_temperature(*greedy_draft_logits(target, draft, calibration_prompts(), n))
    others = bench_prompts(10, offset=args.prompts)  # 10 other held-out prompts
    chain = {b: method(draft, b) for b in args.budgets}
    tree = {b: method(ModelDrafter(draft, branching=(4,) * b, width=4, score_temperature=t), b)
            for b in args.budgets}
    for b in args.budgets:  # equal budgets: chain gamma = b vs a dynamic tree of b nodes
        rows[f"chain b={b}"] = row(f"chain, draft, gamma={b}", chain[b])
        rows[f"tree b={b}"] = row(f"dynamic tree, draft, {b} nodes (t = {t})", tree[b])
    ranks = draft_ranks(target, draft, prompts, n)
    fit_on = draft_ranks(target, draft, others, n)
    seen = collections.Counter(min(x, 3) for r in ranks for x in r)
    print("\nrank of the target's greedy token under the draft: " + ", ".join(
        f"{'3+' if k == 3 else k}: {v / sum(seen.values()):.3f}" for k, v in sorted(seen.items())))
    print(f"tree vs chain at equal draft budget (tokens per target call; score temperature t = {t};"
          " static: replayed, fitted on the other prompts):")
    for b in args.budgets:
        c, d = rows[f"chain b={b}"]["tokens_per_call"], rows[f"tree b={b}"]["tokens_per_call"]
        s = replay(ranks, fit_static_tree(fit_on, b))[0]
        c2, d2 = (tokens_per_call(run[b], target, others, n) for run in (chain, tree))
        replayed = replay(ranks, {(0,) * k for k in range(1, b + 1)})[0]
        print(f"  budget {b:2}: chain {c:.2f} (replayed {replayed:.2f})"
              f"  dynamic tree {d:.2f}  ratio {d / c:.2f}x"
              f"  best static tree {s:.2f}  ratio {s / c:.2f}x"
              f"  | 10 other prompts: chain {c2:.2f}  dynamic tree {d2:.2f}  ratio {d2 / c2:.2f}x",
              flush=True)
    best_row = max(rows.values(), key=lambda r: r["speedup"])
    print(f"best: {best_row['name']}: {best_row['speedup']:.2f}x (median), "
          f"{best_row['total']:.2f}x (total time)")


if __name__ == "__main__":
    main()

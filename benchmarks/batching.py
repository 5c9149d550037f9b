"""Batched speculative decoding: throughput at batch 1-16, and where speculation stops paying.

    python benchmarks/batching.py [--prompts 32] [--max-new-tokens 64] [--batches 1 2 4 8 16]
                                  [--gammas 2 4] [--temperatures 0 1] [--repeats 3]
                                  [--plot figures/batching.png] [--device cpu] [--model smollm2]

The same held-out prompts (of different lengths) are decoded at every batch size B, in groups of B.
Each group is decoded autoregressively (generate) and speculatively (the shipped draft, a chain of
gamma tokens), alternately, each timed as the best of --repeats runs (benchmarks/common.py); the
speedup of a group is the ratio of the two times, reported as the median over the groups with its
spread. At temperature 0 every row is compared with the AR output (last column: rows that differ;
it must be 0). At temperature 1 both sample (seed 0), so their texts differ; the draft's tokens
per call are lower there, and sampled text does not degenerate into loops as greedy text does.
A list of prompts goes to minispec.batch.loop (ms.generate / ms.speculative_generate send it
there), whose caches are minispec.batch.RaggedCache; kit.timing.step_cost times a batch of rows.
--model smollm2: the real model (minispec.bridge.smollm2) on benchmarks/real_model.py's 12 chat
prompts (9 copy-heavy, 3 free writing), drafted by prompt lookup (no draft calls: c_B = 0), each
row ending at <|im_end|>; use --batches 1 2 3 4 6 12, which divide the 12 prompts into equal groups.

The theory's account (notebook 03 with costs measured at batch B): a round costs gamma draft
calls c_B and one target call on gamma + 1 tokens per row, v_B (both relative to a target call on
one token per row), and yields the batch's tokens per call, which the slowest row sets (the batch
runs until every row is done). Predicted speedup = tokens per call / (gamma c_B + v_B). At batch 1
verification is nearly free; as B grows each call becomes compute-bound, v_B climbs towards
gamma + 1, and the crossover is the first batch size whose measured median speedup falls below 1.
Writes nothing but the plot: copy the output into figures/batching.md.
"""
import statistics

import torch

import minispec as ms
from minispec.kit.timing import step_cost

from common import count, out_file, paired, parser, temperature  # benchmarks/common.py


def measure(target, draft, prompts, B, gamma, n, repeats, temperature, eos=None):
    groups = [prompts[i:i + B] for i in range(0, len(prompts), B)]

    def one(out):  # batch 1 as a single prompt (the unbatched call): its result as a list of one
        return out if B > 1 else [out]

    ratios, t_ar, t_sp, calls, longest, wrong = [], 0.0, 0.0, [], [], 0
    n_ar = n_sp = 0  # new tokens decoded by AR and by speculation (rows may end at eos)
    for group in groups:
        ids = group if B > 1 else group[0]
        ar, sp, ta, ts = paired(
            lambda: one(ms.generate(target, ids, n, temperature=temperature, eos_token=eos)),
            lambda: one(ms.speculative_generate(target, draft, ids, n, gamma=gamma,
                                                temperature=temperature, eos_token=eos)), repeats)
        if temperature == 0:  # greedy: must be 0 (a near-tie could flip on a GPU)
            wrong += sum(s.tokens != a.tokens for s, a in zip(sp, ar))
        ratios.append(ta / ts)
        t_ar, t_sp = t_ar + ta, t_sp + ts
        n_ar += sum(len(r.tokens) for r in ar)
        n_sp += sum(len(r.tokens) for r in sp)
        # the batch's target calls and tokens: its slowest row's, its longest row's
        calls.append(max(r.stats.target_calls for r in sp))
        longest.append(max(len(r.tokens) for r in sp))
    # inclusive: quartiles within the ratios (the exclusive default reaches past 2 groups)
    q = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return dict(ar_tps=n_ar / t_ar, sp_tps=n_sp / t_sp,
                speedup=statistics.median(ratios), lo=min(ratios), q1=q[0], q3=q[2],
                hi=max(ratios), groups=len(groups),
                tokens_per_call=statistics.mean(longest) / statistics.mean(calls), wrong=wrong)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=32, help="at most 32")
    ap.add_argument("--max-new-tokens", type=count, default=64)
    ap.add_argument("--batches", type=count, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--gammas", type=count, nargs="+", default=[2, 4])
    ap.add_argument("--temperatures", type=temperature, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--repeats", type=count, default=3)
    ap.add_argument("--plot", type=out_file, help="save a figure of the speedups here")
    ap.add_argument("--device", default="cpu",
                    help="e.g. cuda: the models (and so the caches) move there")
    ap.add_argument("--model", choices=["tiny", "smollm2"], default="tiny",
                    help="smollm2: the real model with prompt lookup on real_model.py's prompts")
    args = ap.parse_args(argv)
    n, eos = args.max_new_tokens, None
    if args.model == "smollm2":
        from real_model import COPY, FREE  # benchmarks/real_model.py
        from minispec.bridge import smollm2
        target, tok = smollm2.load()
        target, eos = target.to(args.device), tok.eos
        draft = ms.load_drafter("lookup", target)
        prompts = [tok.ask(text) for text in (COPY + FREE)[:args.prompts]]
        copying = min(len(prompts), len(COPY))
        what = (f"chat prompts ({copying} copy-heavy, {len(prompts) - copying} free writing), "
                "prompt lookup drafting")
    else:
        target = ms.load_model("target").to(args.device)
        draft = ms.load_model("draft").to(args.device)
        # 32 distinct pieces, cut to 32..128 tokens
        halves = [h for p in ms.data.prompts(16, length=256) for h in (p[:128], p[128:])]
        prompts = [h[:32 + (37 * i) % 97] for i, h in enumerate(halves[:args.prompts])]
        what = ("held-out prompts (at temperature 0 greedy text of these tiny models soon repeats "
                "itself, which raises tokens per call; its effect on the speedup differs by batch "
                "size (the tables))")
    if len(prompts) < args.prompts:  # --prompts 40 ran 32 and said nothing
        ap.error(f"--prompts {args.prompts}: there are {len(prompts)} prompts for this model")
    if max(args.batches) > len(prompts):  # its rows were all the prompts: a smaller batch
        ap.error(f"--batches {max(args.batches)} is more than the {len(prompts)} prompts")
    print(f"{len(prompts)} {what}: {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
          f"{n} new tokens each; device {args.device}, torch threads {torch.get_num_threads()}")
    ms.generate(target, prompts[0], 8)  # warm up
    results, costs = {}, {}
    for temp in args.temperatures:
        for gamma in args.gammas:
            print(f"\ntemperature {temp}, gamma {gamma}\n| batch | AR tokens/s | speculative "
                  f"tokens/s | speedup (median; quartiles; min-max) | groups | tokens/call | v_B | "
                  f"c_B | predicted | rows != AR |\n|---|---|---|---|---|---|---|---|---|---|")
            for B in args.batches:
                r = measure(target, draft, prompts, B, gamma, n, args.repeats, temp, eos)
                if (gamma, B) not in costs:  # call costs do not depend on the temperature
                    t1 = step_cost(target, 1, 96, 15, B)
                    v = step_cost(target, gamma + 1, 96, 15, B) / t1
                    c = step_cost(draft, 1, 96, 15, B) / t1 if isinstance(draft, ms.GPT) else 0.0
                    costs[gamma, B] = v, c
                r["v"], r["c"] = costs[gamma, B]
                r["predicted"] = r["tokens_per_call"] / (gamma * r["c"] + r["v"])
                results[temp, gamma, B] = r
                print(f"| {B} | {r['ar_tps']:.0f} | {r['sp_tps']:.0f} | {r['speedup']:.2f}x; "
                      f"{r['q1']:.2f}-{r['q3']:.2f}; {r['lo']:.2f}-{r['hi']:.2f} | {r['groups']} | "
                      f"{r['tokens_per_call']:.2f} | {r['v']:.2f} | {r['c']:.3f} | "
                      f"{r['predicted']:.2f}x | {r['wrong'] if temp == 0 else '-'} |", flush=True)
            slower = [B for B in args.batches if results[temp, gamma, B]["speedup"] < 1]
            if slower:
                where = f"stops paying at batch {slower[0]}"
            else:
                where = f"pays up to batch {max(args.batches)}"
            print(f"crossover (temperature {temp}, gamma {gamma}): speculation {where}")
    if args.plot:
        plot(args.plot, results, costs, args.temperatures, args.gammas, args.batches)
        print(f"\nplot: {args.plot}")


def plot(path, results, costs, temperatures, gammas, batches, predicted=False):
    """Speedup (median, quartiles) and v_B against batch size; results[temp, gamma, B] holds
    "speedup", "q1", "q3" (and "predicted", drawn dotted if asked), costs[gamma, B] = (v_B, c_B).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), layout="constrained")
    for temp in temperatures:
        for gamma in gammas:
            rs = [results[temp, gamma, B] for B in batches]
            line, = axes[0].plot(batches, [r["speedup"] for r in rs], "o-",
                                 label=f"T={temp:g}, gamma {gamma}")
            axes[0].fill_between(batches, [r["q1"] for r in rs], [r["q3"] for r in rs],
                                 alpha=0.15, color=line.get_color())
            if predicted:
                axes[0].plot(batches, [r["predicted"] for r in rs], "s:",
                             label=f"predicted, T={temp:g}, gamma {gamma}")
    for gamma in gammas:
        axes[1].plot(batches, [costs[gamma, B][0] for B in batches], "o-",
                     label=f"v_B({gamma}): {gamma + 1} tokens vs 1")
    axes[0].axhline(1, color="gray", lw=0.8)
    axes[0].set(xscale="log", xlabel="batch size", ylabel="speedup over AR",
                title="speculative / AR (median, quartiles)")
    axes[1].set(xscale="log", xlabel="batch size", ylabel="cost ratio",
                title="verification cost v_B")
    for ax in axes:
        ax.set_xticks(batches, [str(B) for B in batches])
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)

if __name__ == "__main__":
    main()

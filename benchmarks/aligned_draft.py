"""python benchmarks/aligned_draft.py -- three drafts of one shape, side by side on held-out code.

    python benchmarks/aligned_draft.py [--drafts draft draft_distilled draft_onpolicy]
                                       [--gammas 2 3 4 5 6] [--prompts 6] [--max-new-tokens 96]
                                       [--repeats 3] [--out figures]

The drafts: the plain draft, `draft_distilled` (forward KL on corpus windows, 300 steps) and
`draft_onpolicy` (scripts/distill_onpolicy.py: total variation on text the draft writes itself and
corpus windows). For each:
  * held-out alignment (minispec.kit.data.alignment): top-1 agreement and 1 - TV at temperature 1,
    on 64 windows of 256 bytes spread over all six held-out files, and on the first 4 KB in
    128-byte windows (the model card's older measure);
  * on unseen prompts (minispec.kit.data.prompts), for each gamma: the kept fraction at T = 1 and
    T = 0.8, tokens per target call at T = 1, and the speedup at T = 1, each prompt decoded
    autoregressively and speculatively, alternately, each side the best of --repeats runs
    (minispec.kit.timing.compare), judged against a noise band measured in the same run.
Writes figures/aligned_draft.md.
"""
import statistics
from pathlib import Path

from minispec import ModelDrafter, generate, load_model, speculative_generate
from minispec.kit.data import alignment, prompts
from minispec.kit.timing import compare, noise_band
from common import count, out_folder, parser  # benchmarks/common.py

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def kept(target, drafter, ids_list, n, gamma, temperature):
    """(kept fraction, tokens per call) pooled over the prompts, seed i for prompt i."""
    res = [speculative_generate(target, drafter, ids, n, gamma=gamma, temperature=temperature,
                                seed=i) for i, ids in enumerate(ids_list)]
    drafted = sum(r.stats.drafted for r in res)
    accepted = sum(s.accepted for r in res for s in r.steps)
    calls = sum(r.stats.target_calls for r in res)
    return accepted / drafted, sum(len(r.tokens) for r in res) / calls


def run(drafts, gammas, n_prompts, n, repeats, out=FIGURES):
    target = load_model("target")
    ids_list = prompts(n_prompts)
    lines = ["| draft | top-1 (all files) | 1 - TV (all files) | top-1 (first 4 KB) "
             "| 1 - TV (first 4 KB) |", "|---|---|---|---|---|"]
    models = {Path(name).stem: load_model(name) for name in drafts}  # a shipped name or a .pt path
    for name, m in models.items():
        a, b = alignment(target, m, windows=64), alignment(target, m, block_size=128, spread=False)
        lines.append(f"| `{name}` | {a[0]:.3f} | {a[1]:.3f} | {b[0]:.3f} | {b[1]:.3f} |")
        print(lines[-1], flush=True)

    def base(ids):
        return generate(target, ids, n, temperature=1.0, seed=0)

    band = noise_band(lambda: base(ids_list[0]), repeats)
    print(f"noise band +-{band:.1%}", flush=True)
    lines += ["", f"Unseen prompts: {n_prompts} x {n} new tokens; speedup: per-prompt paired "
              f"ratios, best of {repeats}, median (min-max), judged against a noise band of "
              f"+-{band:.0%} measured in the same run.", "",
              "| draft | gamma | kept T=1 | kept T=0.8 | tokens/call T=1 | speedup T=1 | verdict |",
              "|---|---|---|---|---|---|---|"]
    speedups = {name: [] for name in models}
    for name, m in models.items():
        for g in gammas:
            drafter = ModelDrafter(m)
            k1, tpc = kept(target, drafter, ids_list, n, g, 1.0)
            k08, _ = kept(target, drafter, ids_list, n, g, 0.8)

            def method(ids):
                return speculative_generate(target, drafter, ids, n, gamma=g, temperature=1.0,
                                            seed=0)

            cmp = compare(base, method, ids_list, repeats, band)
            lo, hi = min(cmp.ratios), max(cmp.ratios)
            speedups[name].append(cmp.median)
            lines.append(f"| `{name}` | {g} | {k1:.3f} | {k08:.3f} | {tpc:.2f} | "
                         f"{cmp.median:.2f}x ({lo:.2f}-{hi:.2f}) | {cmp.verdict} |")
            print(lines[-1], flush=True)
    lines += ["", "Median speedup over the gammas: "
              + ", ".join(f"`{k}` {statistics.median(v):.2f}x" for k, v in speedups.items())]
    out.mkdir(exist_ok=True)
    (out / "aligned_draft.md").write_text(
        "# Three drafts of one shape (python benchmarks/aligned_draft.py)\n\n"
        + "\n".join(lines) + "\n")
    print(f"wrote {out / 'aligned_draft.md'}")


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--drafts", nargs="+", default=["draft", "draft_distilled", "draft_onpolicy"])
    ap.add_argument("--gammas", nargs="+", type=count, default=[2, 3, 4, 5, 6])
    ap.add_argument("--prompts", type=count, default=6)
    ap.add_argument("--max-new-tokens", type=count, default=96)
    ap.add_argument("--repeats", type=count, default=3)
    ap.add_argument("--out", type=out_folder, default=FIGURES,
                    help="the folder aligned_draft.md is written to (default: figures/)")
    args = ap.parse_args(argv)
    run(args.drafts, args.gammas, args.prompts, args.max_new_tokens, args.repeats, args.out)


if __name__ == "__main__":
    main()

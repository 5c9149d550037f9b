"""Which kernel is the baseline? Greedy decoding and prompt lookup on SmolLM2 under two kernels.

    python benchmarks/kernel_baseline.py [--max-new-tokens 96] [--repeats 3] [--threads 2]
                                         [--out figures/kernel_baseline.md]

bridge/linear.py's default, "packed" (oneDNN on packed weights), made the cheaper one-token step
on the CPU of figures/real_model.md; on the Intel Xeon of figures/real_model_intel.md torch's
nn.Linear did, while packing still made the cheaper call over 4 tokens. "mixed" takes each:
nn.Linear for one token, packed for more. A speedup is only as honest as its baseline, so for each
prompt of benchmarks/real_model.py (9 copy-heavy, 3 free writing; temperature 0, stopping at
<|im_end|>) this times generate against speculative_generate with prompt lookup (gamma 3) under
each kernel, paired and alternating (kit.timing.paired, the best of --repeats a side), stops if
a kernel's lookup differs from its greedy decode, says so if the two kernels' greedy decodes differ
(a float near-tie), and reports lookup against the faster of the two greedy baselines as well as
against its own kernel's.
"""
import argparse
import statistics

import torch

import minispec as ms
from minispec.bridge import smollm2
from minispec.bridge.linear import kernel
from minispec.kit.timing import paired
from real_model import FIGURES, FREE, KINDS

KERNEL_NAMES = ("packed", "mixed")


def times(model, ids, n, eos, gamma, repeats):
    """{kernel: (greedy seconds, lookup seconds, tokens)}, each pair timed alternating."""
    out = {}
    for name in KERNEL_NAMES:
        def greedy():
            return ms.generate(model, ids, n, eos_token=eos).tokens

        def lookup():
            drafter = ms.load_drafter("lookup", model)
            return ms.speculative_generate(model, drafter, ids, n, gamma=gamma,
                                           eos_token=eos).tokens
        with kernel(name):
            a, b, t_greedy, t_lookup = paired(greedy, lookup, repeats)
        if a != b:
            raise AssertionError(f"lookup's tokens differ from greedy's under {name!r}")
        out[name] = (t_greedy, t_lookup, a)
    if out["packed"][2] != out["mixed"][2]:
        print("note: the two kernels' greedy tokens differ (a float near-tie)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--out", default=str(FIGURES / "kernel_baseline.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = smollm2.load()
    eos = tok.encode("<|im_end|>")[0]
    rows, columns = [], {"own": [], "best": [], "greedy": [], "lookup": []}
    for kind, prompts in KINDS.items():
        for text in prompts:
            ids = tok.chat([{"role": "user", "content": text}])
            t = times(model, ids, args.max_new_tokens, eos, args.gamma, args.repeats)
            (gp, lp, _), (gm, lm, _) = t["packed"], t["mixed"]
            best = min(gp, gm)
            row = [gp / lp, gm / lm, best / lp, best / lm, gp / gm, lp / lm]
            if prompts is not FREE:
                for key, value in zip(columns, [row[0], max(row[2], row[3]), row[4], row[5]]):
                    columns[key].append(value)
            rows.append(f"| {kind} | {text[:40]} | {gp:.2f} / {gm:.2f} | {lp:.2f} / {lm:.2f} | "
                        + " | ".join(f"{r:.2f}" for r in row) + " |")
            print(rows[-1], flush=True)
    median = {key: statistics.median(values) for key, values in columns.items()}
    lines = [
        "# Which kernel is the baseline? (SmolLM2, temperature 0)", "",
        f"`python benchmarks/kernel_baseline.py --max-new-tokens {args.max_new_tokens} --repeats "
        f"{args.repeats} --threads {args.threads}` (lookup at gamma {args.gamma}). Times are the "
        "best of the repeats, in seconds; packed / mixed.", "",
        "| kind | prompt | greedy s | lookup s | lookup vs greedy, packed | the same, mixed | "
        "packed lookup vs the faster greedy | mixed lookup vs the faster greedy | "
        "greedy: mixed faster by | lookup: mixed faster by |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        "Copy prompts, medians: lookup against its own kernel's greedy (packed) "
        f"{median['own']:.2f}x; "
        f"the better lookup against the faster greedy {median['best']:.2f}x; mixed greedy faster "
        f"than packed greedy by {median['greedy']:.2f}x, mixed lookup than packed lookup by "
        f"{median['lookup']:.2f}x.", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines[-2:]))


if __name__ == "__main__":
    main()

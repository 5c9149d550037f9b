"""Speedups of this checkout against an earlier commit's, paired in ONE run (issue 21's bar: the
restructuring must leave the benchmarks' speedups within noise).

    python benchmarks/before_after.py --old cd0e268 [--prompts 8] [--max-new-tokens 100]

The old commit's package is exported (git archive) and imported under another name, so both
versions run in this process on the same prompts, the four decodes of a prompt alternating
(old AR, old method, new AR, new method; each the best of --repeats runs). A speedup is always a
version's own autoregressive time over its own method's; the table gives each version's median
per-prompt speedup and range, and the median of the per-prompt ratios new / old.
"""
import atexit
import importlib
import io
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

import minispec as new
from common import count, parser, spread, temperature, timed

ROOT = Path(__file__).resolve().parents[1]


def import_old(commit):
    """The package at `commit`, importable as minispec_old (it uses relative imports only)."""
    run = subprocess.run(["git", "archive", commit, "minispec"], cwd=ROOT, capture_output=True)
    if run.returncode:  # git's own reason (an unknown commit, no repository), not its exit status
        raise SystemExit(f"git archive {commit} failed: {run.stderr.decode().strip()}")
    folder = Path(tempfile.mkdtemp())
    atexit.register(shutil.rmtree, folder, True)  # the copy goes when the run ends
    tar = run.stdout
    tarfile.open(fileobj=io.BytesIO(tar)).extractall(folder, filter="data")
    (folder / "minispec").rename(folder / "minispec_old")
    sys.path.insert(0, str(folder))
    return importlib.import_module("minispec_old")


def methods(ms, target):
    """The benchmarks' headline methods, built by one version's own code: (name, drafter, gamma)."""
    best = ms.FallbackDrafter(ms.PromptLookupDrafter(4, 3),
                              ms.ModelDrafter(ms.load_model("draft_distilled"), threshold=0.5), 8)
    return [("plain draft, chain", ms.load_drafter("draft", target), 4),
            ("best combination: lookup (n>=3) else distilled draft", best, 16),
            ("Hydra tree (its default)", ms.load_drafter("hydra", target), 6),
            ("early exit k=2", ms.load_drafter("early_exit", target), 4),
            ("EAGLE chain", ms.load_drafter("eagle", target), 6)]


def main():
    ap = parser(__doc__)
    ap.add_argument("--old", default="cd0e268", help="the commit to compare against")
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=100)
    ap.add_argument("--repeats", type=count, default=3)
    ap.add_argument("--temperature", type=temperature, default=0.0)
    args = ap.parse_args()
    old = import_old(args.old)
    torch.set_num_threads(2)
    versions = {"old": old, "new": new}
    targets = {k: ms.load_model("target") for k, ms in versions.items()}
    runs = {k: methods(ms, targets[k]) for k, ms in versions.items()}
    prompts = new.data.prompts(args.prompts)
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=0)
    print(f"{args.prompts} held-out prompts, {args.max_new_tokens} new tokens, temperature "
          f"{args.temperature}, best of {args.repeats}, old = {args.old}, torch threads 2\n")
    print("| method | old speedup | new speedup | new / old per prompt | tokens/call old, new |")
    print("|---|---|---|---|---|")
    for i, (name, _, gamma) in enumerate(runs["new"]):
        speed = {"old": [], "new": []}
        tpc = {"old": [], "new": []}
        for ids in prompts:
            best = {}
            for _ in range(args.repeats):  # old AR, old method, new AR, new method, again
                for k, ms in versions.items():
                    t, drafter = targets[k], runs[k][i][1]
                    ar, t_ar = timed(lambda: ms.generate(t, ids, **kw))
                    res, t_sp = timed(lambda: ms.speculative_generate(t, drafter, ids, gamma=gamma,
                                                                      **kw))
                    best[k, "ar"] = min(best.get((k, "ar"), t_ar), t_ar)
                    best[k, "sp"] = min(best.get((k, "sp"), t_sp), t_sp)
                    if args.temperature == 0:
                        assert res.tokens == ar.tokens, (k, name)
                    tpc[k].append(res.stats.tokens_per_call)
            for k in versions:
                speed[k].append(best[k, "ar"] / best[k, "sp"])
        ratio = [n / o for n, o in zip(speed["new"], speed["old"])]
        print(f"| {name} (gamma {gamma}) | {spread(speed['old'])} | {spread(speed['new'])} | "
              f"{spread(ratio)} | {statistics.mean(tpc['old']):.2f}, "
              f"{statistics.mean(tpc['new']):.2f} |", flush=True)


if __name__ == "__main__":
    main()

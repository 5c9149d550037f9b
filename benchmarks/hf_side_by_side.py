"""minispec against transformers on the same weights: greedy, assisted generation, prompt lookup.

    python benchmarks/hf_side_by_side.py [--gammas 2 4 6] [--prompts 8] [--max-new-tokens 100]
                                         [--repeats 3] [--out figures/hf_side_by_side.md]

The shipped target and draft are converted to transformers' GPT2LMHeadModel
(minispec.bridge.hf.to_hf), and every benchmark prompt is decoded greedily by both libraries,
back to back in this process:
  greedy        minispec.generate                    vs  model.generate()
  draft model   speculative_generate(target, draft)  vs  model.generate(assistant_model=draft)
  heuristic     ... gamma=Heuristic(g)               vs  num_assistant_tokens_schedule=
                                                             "heuristic_transient"
  prompt lookup ... PromptLookupDrafter(max_n=2)     vs  model.generate(prompt_lookup_num_tokens=g)
Every output must equal minispec's plain greedy output token for token (the script stops if not).
Target calls are counted on both sides (a forward hook on the transformers target): with the same
rule they must match. Prompt lookup's rules differ: transformers drafts after the first (oldest)
occurrence of the n-gram and stops at the context's end, minispec after the newest and copies on
past the end, so the lookup rows' call counts differ and their ratio mixes the two rules with the
two libraries' overheads. Speed: transformers' wall time / minispec's, each the best of --repeats
runs taken alternately (benchmarks/common.py), per prompt (median) and in total.
Writes figures/hf_side_by_side.md (or --out).
"""
import statistics
from pathlib import Path

import torch

import minispec as ms
from minispec.adaptive import Heuristic
from minispec.bridge.hf import to_hf
from minispec.drafters import PromptLookupDrafter
from minispec.kit.data import prompts as bench_prompts

from common import count, out_folder, paired, parser  # benchmarks/common.py

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def run_hf(hf_target, ids, n, calls, **kw):
    x = torch.tensor([ids])
    calls[0] = 0
    out = hf_target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                             do_sample=False, pad_token_id=0, **kw)
    return out[0, len(ids):].tolist()


def assisted(hf_draft, gamma, schedule):
    """generate() kwargs for assisted generation; transformers reads gamma from the *assistant's*
    config."""
    c = hf_draft.generation_config
    c.num_assistant_tokens = gamma
    c.num_assistant_tokens_schedule = schedule
    c.assistant_confidence_threshold = 0.0
    return dict(assistant_model=hf_draft)


@torch.inference_mode()
def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--gammas", type=count, nargs="+", default=[2, 4, 6])
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=100)
    ap.add_argument("--repeats", type=count, default=3,
                    help="runs of each side per prompt; the best time counts")
    ap.add_argument("--threads", type=count, default=1, help="torch threads for both libraries")
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="draft")
    ap.add_argument("--out", type=out_folder, default=FIGURES / "hf_side_by_side.md",
                    help="where to write the table")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    transformers = __import__("transformers")
    transformers.logging.set_verbosity_error()  # its assisted-generation deprecation notes
    target, draft = ms.load_model(args.target), ms.load_model(args.draft)
    hf_target, hf_draft = to_hf(target), to_hf(draft)
    calls = [0]
    hf_target.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    prompts, n = bench_prompts(args.prompts), args.max_new_tokens
    lookup = PromptLookupDrafter(max_n=2)  # transformers' default max_matching_ngram_size

    def ours_greedy(ids, g):
        return ms.generate(target, ids, n)

    def ours_draft(ids, g):
        return ms.speculative_generate(target, draft, ids, n, gamma=g)

    def ours_heuristic(ids, g):
        return ms.speculative_generate(target, draft, ids, n, gamma=Heuristic(g))

    def ours_lookup(ids, g):
        return ms.speculative_generate(target, lookup, ids, n, gamma=g)

    def hf_lookup(ids, g):
        return dict(prompt_lookup_num_tokens=g, max_matching_ngram_size=2)

    methods = [("greedy", None, ours_greedy, lambda ids, g: {})]
    for g in args.gammas:
        methods += [
            ("draft model", g, ours_draft, lambda ids, g: assisted(hf_draft, g, "constant")),
            ("heuristic", g, ours_heuristic,
             lambda ids, g: assisted(hf_draft, g, "heuristic_transient")),
            ("prompt lookup", g, ours_lookup, hf_lookup)]
    for ids in prompts[:1]:  # warm up both libraries on every method
        for _, g, ours, theirs in methods:
            ours(ids, g or 1)
            run_hf(hf_target, ids, n, calls, **theirs(ids, g or 1))
    ref = [ms.generate(target, ids, n).tokens for ids in prompts]
    head = ("| method | gamma | identical to greedy | target calls minispec / transformers | "
            "minispec tok/s | transformers tok/s | speed ratio (median) | speed ratio (total) |")
    lines = [f"{len(prompts)} held-out prompts, {n} new tokens, temperature 0, torch threads "
             f"{args.threads}, transformers {transformers.__version__}. "
             "Speed ratio = transformers time / minispec time.",
             "", head, "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for name, g, ours, theirs in methods:
        same, ratios, c_ours, c_hf, t_ours, t_hf = 0, [], 0, 0, 0.0, 0.0
        for ids, want in zip(prompts, ref):
            kw = theirs(ids, g)
            out, res, dt_hf, dt_ours = paired(lambda: run_hf(hf_target, ids, n, calls, **kw),
                                              lambda: ours(ids, g), args.repeats)
            if not res.tokens == out == want:
                raise SystemExit(f"{name} gamma={g}: outputs differ from greedy decoding")
            same += 1
            ratios.append(dt_hf / dt_ours)
            c_ours, c_hf = c_ours + res.stats.target_calls, c_hf + calls[0]
            t_ours, t_hf = t_ours + dt_ours, t_hf + dt_hf
        toks = n * len(prompts)
        line = (f"| {name} | {g or '-'} | {same}/{len(prompts)} | {c_ours} / {c_hf} | "
                f"{toks / t_ours:.1f} | {toks / t_hf:.1f} | {statistics.median(ratios):.2f}x | "
                f"{t_hf / t_ours:.2f}x |")
        lines.append(line)
        print(line, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

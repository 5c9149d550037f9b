"""What every benchmark shares: how a speedup is measured on a noisy machine. The functions live in
the package's kit (minispec/kit/timing.py), so that notebooks, the demo and the benchmarks time one
way: paired, alternating, best of a few runs, with the spread reported."""
from minispec.kit.timing import agreement, compare, noise_band, paired, spread, timed, verdict

__all__ = ["agreement", "compare", "noise_band", "paired", "spread", "timed", "verdict"]

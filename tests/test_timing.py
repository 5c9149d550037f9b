"""A speed verdict needs the prompts to agree (issue 31, item 1): `agreement` and `compare`.

Before, `Comparison.verdict` read the median of 3 prompts against a band measured on the first
prompt alone, and printed "faster" over a prompt that was slower beyond the band."""
import pytest

from minispec.kit import timing


@pytest.mark.parametrize("ratios, said, counts", [
    ([1.3, 1.2, 1.4], "faster", "faster on 3 of 3 prompts"),
    ([0.7, 0.8, 0.85], "slower", "slower on 3 of 3 prompts"),
    ([1.02, 0.98, 1.0], "the same (within noise)", "within noise on 3 of 3 prompts"),
    ([1.3, 1.35, 0.8], "mixed", "faster on 2, slower on 1 of 3 prompts"),   # median 1.3: faster
    ([1.3, 1.05, 1.4], "mixed", "faster on 2, within noise on 1 of 3 prompts"),
    ([1.3], "faster", "faster on 1 of 1 prompt"),
])
def test_agreement_needs_every_prompt(ratios, said, counts):
    """A median verdict ("faster" over [1.3, 1.35, 0.8]) passed."""
    assert timing.agreement(ratios, 0.1) == (said, counts)


def test_agreement_refuses_no_ratios():
    with pytest.raises(ValueError, match="at least one ratio"):
        timing.agreement([], 0.1)


def test_compare_measures_the_band_on_every_prompt(monkeypatch):
    """A band measured on the first prompt alone (here quiet: the floor, +-1%) passed; the second
    prompt's self-timing is 1.5 against 1.0, so the band is 0.5 and its 1.4x is within noise."""
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    durations = {("base", "a"): iter([1.0, 1.0, 1.0, 1.0]),  # self-pair, then the pair with method
                 ("base", "b"): iter([1.5, 1.0, 1.4]),
                 ("method", "a"): iter([0.5]),
                 ("method", "b"): iter([1.0])}

    def run(side, item):
        clock[0] += next(durations[(side, item)])
        return side

    cmp = timing.compare(lambda i: run("base", i), lambda i: run("method", i), ["a", "b"],
                         repeats=1)
    assert cmp.band == pytest.approx(0.5)
    assert cmp.ratios == pytest.approx([2.0, 1.4])
    assert cmp.verdict == "mixed"
    assert str(cmp) == ("1.70x (1.40-2.00): mixed, faster on 1, within noise on 1 of 2 prompts "
                        "(noise band +-50%)")


def test_race_times_the_loop_and_splits_a_round():
    """race's method must be the loop itself (same tokens as speculative_generate) and its parts
    must add up to the round's measured cost; a wrapper that lost the drafter's output, or a split
    that dropped the rest of the loop, fails here."""
    import minispec as ms
    target = ms.load_model("target")
    items = list(enumerate(ms.data.prompts(2, length=32)))
    cmp, line, parts = timing.race(target, ms.EarlyExitDrafter(target, 2), items, 8, 3,
                                   band=0.0, repeats=1)
    for (seed, ids), got in zip(items, cmp.method):
        want = ms.speculative_generate(target, ms.EarlyExitDrafter(target, 2), ids, 8, gamma=3,
                                       temperature=1.0, seed=seed)
        assert got.tokens == want.tokens
    assert [r.tokens for r in cmp.base] == [ms.generate(target, ids, 8, temperature=1.0,
                                                        seed=seed).tokens for seed, ids in items]
    assert min(parts.values()) >= 0 and parts["draft"] > 0 and parts["score"] > 0
    assert f"{sum(round(p, 2) for p in parts.values()):.2f} autoregressive steps" in line


def test_round_line_says_a_slowdown_only_beyond_the_band():
    """race's line: the parts and their sum; a round that costs more steps than its tokens is
    called a slowdown only beyond the noise band (1.36 steps for 1.33 tokens is 2% over: within
    a band of 9%, beyond one of 1%); a round that costs fewer steps than its tokens adds nothing."""
    parts = {"draft": 0.28, "score": 1.01, "rest": 0.07}
    wide = timing.round_line(parts, 1.33, 0.09)
    assert wide.startswith("a round: drafting 0.28 + verification call 1.01 + the rest of the "
                           "loop 0.07 = 1.36 autoregressive steps, for 1.33 tokens\n")
    assert "within the noise band +-9%" in wide and "more steps than" not in wide
    narrow = timing.round_line(parts, 1.33, 0.01)
    assert "costs more steps than the tokens it yields" in narrow and "within" not in narrow
    assert narrow.endswith("its largest part is the verification call")
    assert "\n" not in timing.round_line(parts, 1.40, 0.0)
    assert "costs more steps" in timing.round_line(parts, 1.35, 0.0)  # no band: any excess
    # the band is relative: 3.20 steps for 3.00 tokens is 6% over, within 9% (an absolute band
    # of 0.09 steps would call it a slowdown)
    assert "within the noise band" in timing.round_line({"draft": 0.2, "score": 2.9, "rest": 0.1},
                                                        3.00, 0.09)
    drafting = timing.round_line({"draft": 2.0, "score": 1.0, "rest": 0.1}, 2.5, 0.05)
    # the sum is of the parts as printed: 0.21 + 0.94 + 0.04 = 1.19 (notebook 11 once printed
    # 1.20, the sum of the unrounded 0.214 + 0.944 + 0.044)
    summed = timing.round_line({"draft": 0.214, "score": 0.944, "rest": 0.044}, 1.33, 0.05)
    assert "0.21 + verification call 0.94 + the rest of the loop 0.04 = 1.19 " in summed
    assert drafting.endswith("its largest part is drafting")


def test_noise_band_has_a_floor(monkeypatch):
    """A quiet clock (every run the same) read a band of 0, and 0.99x was then called "slower";
    the band is at least BAND_FLOOR, and a wider measured band is kept as measured."""
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    costs = iter([1.0] * 4 + [1.0, 1.0, 1.03, 1.0])  # the second band: 1.03 against 1.0

    def run():
        clock[0] += next(costs)
    band = timing.noise_band(run, repeats=1, pairs=2)
    assert band == timing.BAND_FLOOR == 0.01
    assert timing.verdict(0.991, band) == timing.verdict(1.01, band) == "the same (within noise)"
    assert timing.verdict(0.98, band) == "slower"  # the floor is 1%, no wider
    assert timing.noise_band(run, repeats=1, pairs=2) == pytest.approx(0.03)
    with pytest.raises(ValueError, match="pairs must be an integer >= 1"):
        timing.noise_band(run, repeats=1, pairs=0)


def test_step_cost_names_its_warm_up_when_reps_are_too_few(random_gpt):
    """step_cost(reps=5) said "reps must be an integer >= 1, got 0": 0 was reps less the warm-up."""
    m = random_gpt(vocab_size=16, n_layer=1, n_embd=16, block_size=32)
    with pytest.raises(ValueError, match=r"reps must be > 5 \(the first 5 .* warm-up\), got 5"):
        timing.step_cost(m, 1, context=4, reps=5)


@pytest.mark.parametrize("ratio, band, word", [(1.0, -1, "band must be >= 0"),
                                               (1.0, float("nan"), "band must be >= 0"),
                                               (1.0, None, "band must be a number"),
                                               (None, 0.05, "ratio must be a number")])
def test_verdict_refuses_a_band_or_ratio_that_is_no_band(ratio, band, word):
    """verdict(1.0, -1) said "faster": 1.0 > 1 + (-1). A negative or NaN band now says so."""
    with pytest.raises(ValueError, match=word):
        timing.verdict(ratio, band)


def test_a_band_at_its_floor_says_so():
    """noise_band never reports less than BAND_FLOOR (1%): a verdict read against the floor says
    so, where "+-1%" alone read as a measured band (notebooks 03 and 05-12 printed it so)."""
    floor = timing.Comparison([1.5], [], [], timing.BAND_FLOOR)
    assert str(floor).endswith("(noise band +-1%, its floor)")
    assert str(timing.Comparison([1.5], [], [], 0.02)).endswith("(noise band +-2%)")
    line = timing.round_line({"draft": 0.0, "score": 1.0, "rest": 0.005}, 1.0, timing.BAND_FLOOR)
    assert "within the noise band +-1%, its floor" in line

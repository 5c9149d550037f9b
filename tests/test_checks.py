"""minispec.kit.checks, which the notebooks and the tests share: the chi-square p-value against
scipy's, pooling and impossible cells; the repeated n-gram share on known sequences."""
import math

import pytest
import scipy.stats
import torch

from minispec.kit import checks


def test_chi2_pvalue_matches_scipy_and_pools_small_cells():
    counts, probs = [48, 30, 22], [0.5, 0.3, 0.2]
    want = scipy.stats.chisquare(counts, [50, 30, 20]).pvalue
    assert checks.chi2_pvalue(counts, probs) == pytest.approx(want, rel=1e-9)
    # the last two cells expect 2 and 1: pooled into one (expected 3) before the test
    pooled = scipy.stats.chisquare([90, 7, 3], [90, 7, 3]).pvalue
    assert checks.chi2_pvalue([90, 7, 2, 1], [0.9, 0.07, 0.02, 0.01]) == pytest.approx(pooled)
    assert checks.chi2_pvalue([10, 1], [1.0, 0.0]) == 0.0  # an impossible outcome was seen
    assert checks.chi2_pvalue(torch.tensor([900, 100]), [0.5, 0.5]) < 1e-6
    with pytest.raises(ValueError, match="sum to 1"):
        checks.chi2_pvalue([1, 2], [0.5, 0.4])
    with pytest.raises(ValueError, match="differ"):
        checks.chi2_pvalue([1, 2, 3], [0.5, 0.5])
    for counts, probs in (([-1, 5], [0.5, 0.5]), ([float("nan"), 3], [0.5, 0.5]),
                          ([3, 5], [1.5, -0.5])):  # each read as a p-value before
        with pytest.raises(ValueError, match=">= 0"):
            checks.chi2_pvalue(counts, probs)


def test_chi2_pvalue_spends_a_degree_of_freedom_per_fitted_parameter():
    """scipy's ddof: a law fitted to the same counts is tested on cells - 1 - fitted degrees of
    freedom (X^2 = 10 on 3 cells: 2 df without, 1 df with one fitted parameter)."""
    counts, probs = [10, 20, 30], [1 / 3] * 3
    for fitted in (0, 1):
        want = scipy.stats.chisquare(counts, [20, 20, 20], ddof=fitted).pvalue
        assert checks.chi2_pvalue(counts, probs, fitted=fitted) == pytest.approx(want, rel=1e-9)
    assert checks.chi2_pvalue(counts, probs, fitted=1) < checks.chi2_pvalue(counts, probs)
    with pytest.raises(ValueError, match="no degree of freedom"):
        checks.chi2_pvalue(counts, probs, fitted=2)


def test_repeated_share_known_answers():
    assert checks.repeated_share([1, 2, 3, 4], [5, 6, 7, 8]) == 0.0
    assert checks.repeated_share([1, 2, 3, 4], [1, 2, 3, 4]) == 0.25  # only the last 4-gram repeats
    assert checks.repeated_share([7, 7, 7, 7], [7, 7]) == 1.0
    assert checks.repeated_share([1, 2], [1, 2, 1, 2], n=2) == 0.75
    with pytest.raises(ValueError, match="at least one"):
        checks.repeated_share([1, 2, 3], [])


def test_pearson_is_what_chi2_pvalue_computes_when_nothing_is_pooled():
    observed = torch.tensor([30.0, 50.0, 20.0], dtype=torch.float64)
    law = torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64)
    stat = float(((observed - 100 * law) ** 2 / (100 * law)).sum())  # 1.0 + 0 + 1.0
    assert checks.pearson(observed, 100 * law) == pytest.approx(math.exp(-stat / 2))  # df 2
    assert checks.chi2_pvalue(observed, law) == checks.pearson(observed, 100 * law)
    with pytest.raises(ValueError, match="degree of freedom"):
        checks.pearson(observed, 100 * law, fitted=2)


def test_exact_law_weighs_unnormalized_multinomial_weights():
    """torch.multinomial takes weights that need not sum to 1; so must the enumeration (a law
    that multiplied raw weights passed every test outside test_without_replacement)."""
    w = torch.tensor([1.0, 3.0])
    one = checks.exact_law(lambda: int(torch.multinomial(w, 1)))
    assert one == pytest.approx({0: 0.25, 1: 0.75})
    both = checks.exact_law(lambda: tuple(torch.multinomial(w, 2, replacement=False).tolist()))
    assert both == pytest.approx({(0, 1): 0.25, (1, 0): 0.75})

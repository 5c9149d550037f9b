"""The package is the paper: speculative_generate with a model drafter's chain makes the same draws
as minispec.kit.paper, a line-for-line transcription of Leviathan et al. 2023's Algorithm 1 (no KV
cache, no trees), on the same torch.Generator stream: the same tokens, token for token, at T = 1
and with top-k / top-p warping both p and q.

Both consume the generator in the same order, each step: x_1..x_gamma ~ q_i (one multinomial
each), then r_1, r_2, ... up to the first rejection (one uniform each), then t ~ p' (one
multinomial). The shipped pair runs in float64 so that the package's cached forward passes and the
transcription's full ones round alike (in float32 a draw could land on the other side of a
boundary that moved by one rounding step).
"""
import pytest

import minispec as ms
from minispec.kit.paper import speculative_decoding


@pytest.fixture(scope="module")
def pair():
    return ms.load_model("target").double(), ms.load_model("draft").double()


@pytest.mark.parametrize("warp", [dict(), dict(top_k=8), dict(top_p=0.8),
                                  dict(temperature=0.7, top_k=20, top_p=0.9)],
                         ids=["T=1", "top-k 8", "top-p 0.8", "T=0.7, top-k 20, top-p 0.9"])
def test_the_loop_makes_the_papers_draws(pair, warp):
    target, draft = pair
    kw, steps = {"temperature": 1.0, **warp}, []
    for seed, text in enumerate(["def fib(n):\n    ", "import os\nimport ", "    for i in "]):
        ids = ms.encode(text)
        res = ms.speculative_generate(target, draft, ids, 24, gamma=4, seed=seed, **kw)
        assert res.tokens == speculative_decoding(target, draft, ids, 24, 4, seed=seed, **kw)
        steps += res.steps
    assert any(s.accepted < len(s.tree.tokens) for s in steps)  # rejections (residual draws)
    assert any(s.accepted == len(s.tree.tokens) == 4 for s in steps)  # and bonus tokens


def test_a_model_drafter_chain_is_the_same_as_the_draft_model(pair):
    """ModelDrafter(draft), the drafter a bare GPT becomes, with its default chain: the same draws
    again (at a larger gamma, so some steps keep none of the guesses and some keep all six)."""
    target, draft = pair
    ids = ms.encode("class Point:\n    def __init__(self, x, y):\n        ")
    res = ms.speculative_generate(target, ms.ModelDrafter(draft), ids, 24, gamma=6,
                                  temperature=1.0, seed=7)
    assert res.tokens == speculative_decoding(target, draft, ids, 24, 6, seed=7)
    assert {0, 6} <= {s.accepted for s in res.steps}


@pytest.mark.parametrize("gamma, n", [(0, 4), (-1, 4), (2.5, 4), (2, -1)])
def test_bad_gamma_or_length_is_a_value_error_naming_it(pair, gamma, n):
    """gamma < 1 once read p[-gamma - 1:] past the guesses; now each is named."""
    with pytest.raises(ValueError, match="gamma" if n >= 0 else "max_new_tokens"):
        speculative_decoding(*pair, ms.encode("def "), n, gamma)

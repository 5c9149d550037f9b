"""A review of stop 57's lossy rules, the paper's transcription and three drafters: each a crash
from inside (or a silent wrong answer) where a clear ValueError was due.
  - paper.speculative_decoding threw whole()'s ints away: n=5.0 or gamma=4.0 reached range() (a
    TypeError); M_q=None or a Drafter instead of a model was an AttributeError;
  - topk_accept checked nothing: a list p, a 2-d p, candidates=None crashed, and a candidate
    outside the vocabulary ([7] with V = 3) came back with a sample as if it were fine;
  - typical_accept iterated None, an int or a 0-d tensor before checking (TypeErrors), and took
    eps=True as 1;
  - learned_stop: stop_features read token -1 as the last token's probability and crashed on 300
    or 2-d logits; AcceptanceHead took sampled=2 or None into an index; load_stop_head crashed on
    123, on a saved dict without "state_dict" and on a state_dict of the wrong shape;
  - StreamingDrafter.draft before reset (outside the loop) was an AttributeError on None;
  - LookupTreeDrafter.draft took gamma None or -1 as no budget (4 nodes)."""
import numpy as np
import pytest
import torch

import minispec as ms
from minispec.kit import paper
from minispec.methods.lookup_tree import LookupTreeDrafter
from minispec.methods.streaming import StreamingDrafter
from minispec.methods.top_k import topk_accept
from minispec.methods.typical import typical_accept

P = torch.tensor([0.5, 0.3, 0.2])


@pytest.fixture(scope="module")
def pair(random_gpt):
    return random_gpt(vocab_size=16, block_size=32, seed=3), random_gpt(vocab_size=16, seed=4)


def test_the_paper_takes_whole_floats_as_the_loop_does(pair):
    M_p, M_q = pair
    want = paper.speculative_decoding(M_p, M_q, [1, 2, 3], 5, 4)
    assert paper.speculative_decoding(M_p, M_q, [1, 2, 3], 5.0, 4) == want
    assert paper.speculative_decoding(M_p, M_q, [1, 2, 3], 5, 4.0) == want
    assert len(want) == 5


def test_the_paper_takes_two_models(pair):
    M_p, M_q = pair
    for bad in (None, ms.ModelDrafter(M_q)):
        with pytest.raises(ValueError, match="two models: M_q must be a GPT or a Llama, got a "):
            paper.speculative_decoding(M_p, bad, [1, 2, 3], 5, 4)
        with pytest.raises(ValueError, match="two models: M_p must be a GPT or a Llama, got a "):
            paper.speculative_decoding(bad, M_q, [1, 2, 3], 5, 4)


@pytest.mark.parametrize("rule", [topk_accept, typical_accept])
def test_the_lossy_rules_check_p_and_the_candidates_alike(rule):
    for bad in ([0.5, 0.3, 0.2], P[None]):
        with pytest.raises(ValueError, match=r"p must be the target's distribution, a \(V,\)"):
            rule([1], None, bad)
    for bad in (None, 1, torch.tensor(1)):
        with pytest.raises(ValueError, match="candidates must be a list of token ids"):
            rule(bad, None, P)
    for bad in ([7], [-1]):
        with pytest.raises(ValueError, match=r"each candidate must be an integer in \[0, 3\)"):
            rule(bad, None, P)
    assert rule([1], None, P) == rule(torch.tensor([1]), None, P) == rule(np.array([1]), None, P)


def test_typical_accept_refuses_bools_for_its_numbers():
    for kw in ({"eps": True}, {"delta": True}, {"eps": False}):
        with pytest.raises(ValueError, match="eps and delta must be finite numbers > 0"):
            typical_accept([1], None, P, **kw)
    assert typical_accept([1], None, P, eps=0.1, delta=0.3) == 1


def test_stop_features_checks_the_token_and_the_logits():
    from minispec.methods.learned_stop import stop_features
    logits = torch.randn(256, generator=torch.Generator().manual_seed(0))
    for bad in (-1, 256, 300, None, 2.5):
        with pytest.raises(ValueError, match=r"token .* must be an integer in \[0, 256\)"):
            stop_features(logits, bad)
    with pytest.raises(ValueError, match=r"logits must be .* a \(V,\) tensor, got \(1, 256\)"):
        stop_features(logits[None], 3)
    f = stop_features(logits, 255)
    assert torch.allclose(f[2], logits.softmax(-1)[255]) and f.shape == (3,)


def test_the_acceptance_head_takes_bools_only():
    from minispec.methods.learned_stop import AcceptanceHead
    head = AcceptanceHead().requires_grad_(False)
    head.bias.copy_(torch.tensor([-1.0, 1.0]))
    f = torch.zeros(2, 3)
    for bad in (2, None, "yes", torch.tensor([0, 1])):
        with pytest.raises(ValueError, match="sampled must be a bool"):
            head(f[0], sampled=bad)
    assert float(head(f[0], sampled=True)) == float(head(f[0], sampled=np.bool_(True)))
    both = head(f, sampled=torch.tensor([False, True]))  # the loop's tensor of bools
    assert both[0] < 0.5 < both[1]


def test_load_stop_head_names_a_file_that_holds_no_head(tmp_path):
    from minispec.methods.learned_stop import FEATURES, load_stop_head
    with pytest.raises(ValueError, match="path must be a saved head's file .* got 123"):
        load_stop_head(123)
    good = {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}
    for name, ckpt in [("none.pt", {"features": FEATURES}),
                       ("shape.pt", {"features": FEATURES, "state_dict": {**good, "bias": 0 * P}}),
                       ("keys.pt", {"features": FEATURES, "state_dict": {"w": good["weight"]}}),
                       ("five.pt", {"features": FEATURES, "state_dict": 5})]:
        torch.save(ckpt, tmp_path / name)
        with pytest.raises(ValueError, match=f"{name} does not hold an AcceptanceHead's"):
            load_stop_head(tmp_path / name)
    torch.save({"features": FEATURES, "state_dict": good}, tmp_path / "good.pt")
    assert float(load_stop_head(str(tmp_path / "good.pt"))(torch.ones(3), False)) == 0.5


def test_a_streaming_drafter_outside_the_loop_says_so(random_gpt):
    model = random_gpt(vocab_size=16, block_size=32, seed=3)
    with pytest.raises(ValueError, match=r"inside speculative_generate: call reset\(target"):
        StreamingDrafter(model).draft([1, 2, 3], 3)
    got = ms.speculative_generate(model, StreamingDrafter(model), [1, 2, 3, 1, 2], 6, gamma=3)
    assert got.tokens == ms.generate(model, [1, 2, 3, 1, 2], 6).tokens


def test_the_lookup_tree_checks_gamma():
    for bad in (None, -1, 2.5):
        with pytest.raises(ValueError, match="gamma .* must be an integer >= 0"):
            LookupTreeDrafter().draft([1, 2, 1, 2], bad)
    assert LookupTreeDrafter().draft([1, 2, 1, 2], 0).tokens == []
    assert len(LookupTreeDrafter().draft([1, 2, 1, 2], 2.0).tokens) == 2

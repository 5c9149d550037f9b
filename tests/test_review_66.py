"""Findings of the reviews of stop 71, each test failing on the code before its fix."""
import minispec as ms


class Appends(ms.Drafter):
    """A learner's slip: the drafter extends the context it was given, in place, while drafting."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context.append(0)  # unverified: it must not reach the output
        return ms.Tree.chain([])


class Pops(Appends):
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context.pop()  # the loop's p would have had a row too few (a ValueError about p's shape)
        return ms.Tree.chain([])


def test_a_drafter_that_changes_its_context_cannot_change_the_output():
    """The loop handed the drafter its own context list: an append entered the output without
    verification (greedy output [0, 125, 0, 125, ...] where generate writes [32] * 8)."""
    target = ms.load_model("target")
    ids = ms.encode("def fib(n):\n")
    want = ms.generate(target, ids, 8).tokens
    for drafter in (Appends(), Pops()):
        assert ms.speculative_generate(target, drafter, ids, 8, gamma=2).tokens == want
        sampled = ms.speculative_generate(target, drafter, ids, 8, temperature=1.0, seed=3)
        assert sampled.tokens == ms.generate(target, ids, 8, temperature=1.0, seed=3).tokens

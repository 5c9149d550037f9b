"""Notebook 08, exercise "your own policy": a reference solution and a classic wrong answer."""
import minispec as ms


class solution(ms.Fixed):
    """Doubling: x2 after a round whose drafts were all kept, else //2 (at least 1); at most 16."""

    def update(self, step):
        if step.tree.tokens:  # a round that drafted nothing (the last token of a call) says nothing
            self.gamma = min(16, 2 * self.gamma) if step.bonus else max(1, self.gamma // 2)


class wrong(ms.Fixed):
    """The classic mistake: "all kept" read as "kept gamma", wrong when the loop drafted fewer than
    gamma (near the end of a call)."""

    def update(self, step):
        if step.tree.tokens:
            all_kept = step.accepted == self.gamma
            self.gamma = min(16, 2 * self.gamma) if all_kept else max(1, self.gamma // 2)


class ceil_halving(ms.Fixed):
    """Wrong: halving rounds up, (gamma + 1) // 2, where the rule rounds down."""

    def update(self, step):
        if step.tree.tokens:
            self.gamma = min(16, 2 * self.gamma) if step.bonus else max(1, (self.gamma + 1) // 2)


class halve_drafted(ms.Fixed):
    """Wrong (found by an audit): halves the number of tokens the round drafted, not gamma."""

    def update(self, step):
        if step.tree.tokens:
            drafted = len(step.tree.tokens)
            self.gamma = min(16, 2 * self.gamma) if step.bonus else max(1, drafted // 2)


class double_below_cap(ms.Fixed):
    """Wrong (found by a review): doubles only while gamma < 16, so from 3 it reaches 24."""

    def update(self, step):
        if step.tree.tokens:
            if step.bonus and self.gamma < 16:
                self.gamma *= 2
            elif not step.bonus:
                self.gamma = max(1, self.gamma // 2)


# found by reviews: the check must reject these too
more_wrong = [ceil_halving, halve_drafted, double_below_cap]

"""04's loss plot: an axis that grows with the steps run (from a few steps wide), whole
steps on it, or the whole run when its length is given."""

from __future__ import annotations

from hyport_lib.train.result import StepMetrics
from hyport_lib.train.show import loss_figure


def _records(n: int) -> list[StepMetrics]:
    return [StepMetrics(step=i, loss=7.0 - 0.1 * i, learning_rate=1e-4, tokens_per_s_per_card=800.0,
                        real_tokens_per_s_per_card=700.0) for i in range(1, n + 1)]


def test_the_axis_grows_with_the_steps_from_a_few_steps_wide():
    for steps, right in ((1, 5.5), (3, 5.5), (12, 12.5)):
        fig = loss_figure(_records(steps))
        assert [ax.get_xlim() for ax in fig.axes] == [(0.5, right)] * 3, steps
        ticks = fig.axes[0].get_xticks()
        assert all(float(t).is_integer() for t in ticks), ticks  # never 0.96 .. 1.04


def test_with_the_runs_length_the_axis_spans_the_whole_run():
    assert loss_figure(_records(3), total_steps=20).axes[0].get_xlim() == (0.5, 20.5)
    assert loss_figure(_records(25), total_steps=20).axes[0].get_xlim() == (0.5, 25.5)  # resumed past it

"""`repositories.pruning.prune_bounds`: the steps `sessions prune` deletes in, so its
progress bar can move, cover exactly what one prune up to the cutoff would."""

from __future__ import annotations

from hermes_store.repositories.pruning import prune_bounds


def test_bounds_grow_every_step_candidates_and_end_at_the_cutoff() -> None:
    candidates = [{"last_active": float(t)} for t in range(10)]
    assert prune_bounds(candidates, 100.0, 4) == [4.0, 8.0, 100.0]
    assert prune_bounds(candidates, 100.0, 10) == [100.0]
    assert prune_bounds([], 5.0, 3) == [5.0]


def test_equal_activity_times_give_no_repeated_bound() -> None:
    # a bound equal to the previous one would delete nothing: it is skipped
    candidates = [{"last_active": t} for t in (1.0, 1.0, 1.0, 1.0, 2.0, 2.0)]
    assert prune_bounds(candidates, 9.0, 1) == [1.0, 2.0, 9.0]

"""Each member of a group on a node of its own that it would take."""

from __future__ import annotations

from tandem.scheduler.matching import distinct


def test_members_that_take_any_node_get_them_in_order() -> None:
    nodes = ["a", "b", "c"]
    assert distinct([nodes, nodes, nodes]) == ["a", "b", "c"]


def test_more_members_than_nodes_leaves_the_last_without() -> None:
    assert distinct([["a", "b"], ["a", "b"], ["a", "b"]]) == ["a", "b", None]


def test_members_pinned_apart_each_get_their_own() -> None:
    assert distinct([["c"], ["a"], ["b"]]) == ["c", "a", "b"]


def test_a_member_left_without_moves_the_others_along() -> None:
    # The first takes "a" first; the second can only have "a": the first moves on to "b".
    assert distinct([["a", "b"], ["a"]]) == ["b", "a"]
    # A longer path: 0 a->b, 1 b->c, 2 only a.
    assert distinct([["a", "b"], ["b", "c"], ["a"]]) == ["b", "c", "a"]


def test_two_members_pinned_to_one_node_cannot_both_have_it() -> None:
    assert distinct([["a"], ["a"], ["b"]]) == ["a", None, "b"]


def test_a_thousand_members_on_a_chain_need_no_recursion() -> None:
    n = 1000
    # Member i takes node i or i+1; the last member only node 0: every member moves along once.
    candidates = [[str(i), str(i + 1)] for i in range(n - 1)] + [["0"]]
    chosen = distinct(candidates)
    assert None not in chosen and len(set(chosen)) == n

"""tandem.watches: predicates drop an event before its handler runs; the rest queue its keys."""

from __future__ import annotations

from unittest import mock

from tandem.watches import Change, Watch, itself, on_change


def test_an_event_a_predicate_drops_queues_nothing_and_stops_the_predicates_after_it() -> None:
    queue, later = mock.Mock(), mock.Mock(return_value=True)
    handler = mock.Mock(return_value=["a"])
    Watch(queue, handler, (lambda e: e != "drop", later))("drop")
    handler.assert_not_called()
    later.assert_not_called()
    queue.add.assert_not_called()
    Watch(queue, handler, (lambda e: e != "drop", later))("keep")
    later.assert_called_once_with("keep")
    queue.add.assert_called_once_with("a")


def test_urgent_keys_go_ahead_and_the_others_are_queued_as_the_queue_defaults() -> None:
    queue = mock.Mock()
    Watch[str](queue, lambda e: [e, f"{e}-group"], urgent=lambda e: e == "bind")("bind")
    Watch(queue, itself)("pend")
    assert queue.add.call_args_list == [
        mock.call("bind", urgent=True),
        mock.call("bind-group", urgent=True),
        mock.call("pend"),
    ]


def test_an_informers_change_reaches_each_of_its_watches_in_order() -> None:
    seen: list[tuple[str, Change]] = []
    changed = on_change(lambda c: seen.append(("first", c)), lambda c: seen.append(("second", c)))
    changed("ns/a", None, {"metadata": {"name": "a"}})
    change = Change("ns/a", None, {"metadata": {"name": "a"}})
    assert seen == [("first", change), ("second", change)]

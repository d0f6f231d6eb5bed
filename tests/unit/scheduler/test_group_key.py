"""A group's key read as a GroupKey: what kind of group it names, round trip to the same string
(the placeholder job's name and the work queue's key), and how Events name it."""

from __future__ import annotations

import pytest

from tandem.scheduler import groups
from tandem.scheduler.groups import GroupKey


@pytest.mark.parametrize(
    ("key", "kind", "name", "index", "object_key", "title"),
    [
        ("team-a/pg:train", "pg", "train", "", "team-a/train", "PodGroup team-a/train"),
        ("team-a/cpg:disagg", "cpg", "disagg", "", "team-a/disagg", "CompositePodGroup team-a/disagg"),
        ("team-a/lws:serve:3", "lws", "serve", "3", None, "LeaderWorkerSet team-a/serve group 3"),
    ],
)
def test_a_group_key_reads_as_what_it_names_and_back(
    key: str, kind: str, name: str, index: str, object_key: str | None, title: str
) -> None:
    typed = GroupKey.parse(key)
    assert typed == GroupKey("team-a", kind, name, index)
    assert str(typed) == key
    placed = groups.target(key)
    assert (placed.podgroup or placed.composite) == object_key
    assert placed.title == typed.title == title


@pytest.mark.parametrize("key", ["team-a/web-0", "team-a/x:y", "", "team-a/"])
def test_a_pods_own_key_or_an_unknown_kind_is_no_group(key: str) -> None:
    assert GroupKey.parse(key) is None


def test_a_key_resolves_once_to_what_it_places() -> None:
    assert (groups.target("ns/pg:a").podgroup, groups.target("ns/pg:a").composite) == ("ns/a", None)
    assert (groups.target("ns/cpg:a").podgroup, groups.target("ns/cpg:a").composite) == (None, "ns/a")
    lws = groups.target("ns/lws:a:0")
    assert (lws.podgroup, lws.composite, lws.alone) == (None, None, False)
    pod = groups.target("ns/pod-a")
    assert (pod.alone, pod.group, pod.podgroup, pod.namespace, pod.name) == (True, None, None, "ns", "pod-a")


def test_keys_made_from_objects_parse_back_to_them() -> None:
    podgroup = {"metadata": {"namespace": "ns", "name": "train"}}
    composite = {"metadata": {"namespace": "ns", "name": "disagg"}}
    assert GroupKey.parse(groups.key_of_podgroup(podgroup)) == GroupKey("ns", "pg", "train")
    assert GroupKey.parse(groups.key_of_composite(composite)) == GroupKey("ns", "cpg", "disagg")


def test_a_group_titles_itself_from_its_key() -> None:
    group = groups.resolve(groups.target("ns/lws:serve:1"), [], lambda _: None)
    assert group is not None
    assert group.title == "LeaderWorkerSet ns/serve group 1"
    assert groups.alone(groups.target("ns/web-0"), None).title == "Pod ns/web-0"

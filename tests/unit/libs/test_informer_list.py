"""An informer lists a page at a time (client-go's pager), so a cluster of 10,000 Pods is never
decoded as one answer; a page token that expired starts one whole list instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.informer import LIST_PAGE, Informer
from tandem.kube import KubeError


def pod(i: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default", "name": f"p{i}", "resourceVersion": str(i)},
        "spec": {"big": "x" * 100},
    }


class PagedApi:
    def __init__(self, count: int, expire_after: int | None = None) -> None:
        self.pods = [pod(i) for i in range(count)]
        self.asked: list[dict[str, str]] = []
        self.expire_after = expire_after

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        params = dict(params or {})
        self.asked.append(params)
        start = int(params.get("continue", "0"))
        if "continue" in params and self.expire_after is not None and len(self.asked) > self.expire_after:
            raise KubeError(410, "Expired", "The provided continue parameter is too old")
        limit = int(params.get("limit", "0")) or len(self.pods)
        page = self.pods[start : start + limit]
        meta: dict[str, str] = {"resourceVersion": "900"}
        if start + limit < len(self.pods):
            meta["continue"] = str(start + limit)
        return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": [dict(p) for p in page]}


def test_a_list_is_read_a_page_at_a_time_and_each_object_slimmed_as_it_comes() -> None:
    api = PagedApi(LIST_PAGE * 2 + 7)
    slim = lambda p: {"kind": p["kind"], "metadata": p["metadata"]}  # noqa: E731
    informer = Informer(api, ["/api/v1/pods"], {"fieldSelector": "x"}, transform=slim)  # type: ignore[arg-type]
    assert informer._list("/api/v1/pods") == "900"
    assert len(informer.items()) == LIST_PAGE * 2 + 7
    assert informer.get("default/p0") == {"kind": "Pod", "metadata": pod(0)["metadata"]}
    assert [a.get("continue") for a in api.asked] == [None, str(LIST_PAGE), str(2 * LIST_PAGE)]
    assert all(a["limit"] == str(LIST_PAGE) and a["fieldSelector"] == "x" for a in api.asked)


def test_an_expired_page_token_lists_everything_once_more_whole() -> None:
    api = PagedApi(LIST_PAGE * 3, expire_after=2)
    informer = Informer(api, ["/api/v1/pods"], {})  # type: ignore[arg-type]
    informer._list("/api/v1/pods")
    assert len(informer.items()) == LIST_PAGE * 3
    assert "limit" not in api.asked[-1] and "continue" not in api.asked[-1]


def test_a_failure_on_the_first_page_is_the_lists_failure() -> None:
    class Down(PagedApi):
        def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
            raise KubeError(410, "Gone", "too old")

    informer = Informer(Down(1), ["/api/v1/pods"], {})  # type: ignore[arg-type]
    try:
        informer._list("/api/v1/pods")
    except KubeError as e:
        assert e.status == 410
    else:
        raise AssertionError("a 410 on the first page must reach the informer's relist")

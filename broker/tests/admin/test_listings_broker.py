"""The paged admin listings on a real broker: ``/v1/topics``, ``/v1/groups``,
``/v1/queues`` and ``/v1/consumption`` a page at a time, their links followed by the
admin client to the last page, and bad paging parameters refused; and ``/v1/broker``
saying what this broker's code understands (for the operator's feature gate)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.features import RELEASE, SUPPORTED, reported
from rocketcluster.ctl.testing import LocalBroker, local_broker

TOPICS = [f"paged-{i:02d}" for i in range(23)]
GROUPS = ["g-a", "g-b", "g-c"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "paged"},
            "spec": {"controller": {"replicas": 0}, "brokers": {"groups": 1, "replicas": 1}},
        }
    )
    with local_broker(cluster, Path(tmp_path_factory.mktemp("paged"))) as handle:
        with handle.admin() as admin:
            for name in TOPICS:
                admin.create_topic(name, queues=3)
            for name in GROUPS:
                admin.create_group(name)
            admin.reset_offset("g-a", "paged-01", 2, 0)
            admin.reset_offset("g-b", "paged-00", 0, 0)
            admin.reset_offset("g-b", "paged-22", 1, 0)
        yield handle


def _pages(http: httpx.Client, path: str) -> list[list[dict[str, object]]]:
    pages = []
    url: str | None = path
    while url is not None:
        answer = http.get(url)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        url = answer.links.get("next", {}).get("url")
    return pages


def test_topics_come_a_page_at_a_time_in_name_order(broker: LocalBroker) -> None:
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=15) as http:
        first = http.get("/v1/topics", params={"limit": 10})
        assert first.headers["X-Total-Count"] == str(len(TOPICS))
        pages = _pages(http, "/v1/topics?limit=10")
    assert [len(p) for p in pages] == [10, 10, 3]
    assert [t["name"] for p in pages for t in p] == TOPICS
    with broker.admin() as admin:
        assert [t["name"] for t in admin.topics()] == TOPICS


def test_every_queue_and_every_group_s_place_on_it(broker: LocalBroker) -> None:
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=15) as http:
        pages = _pages(http, "/v1/queues?limit=7")
        assert len(pages) == 10  # 69 queues
        assert _pages(http, "/v1/consumption?limit=2")[-1] == [
            {
                "group": "g-b",
                "topic": "paged-22",
                "queueId": 1,
                "committedOffset": 0,
                "nextOffset": 0,
                "minOffset": 0,
                "maxOffset": 0,
                "lag": 0,
                "inflight": 0,
                "ready": 0,
            }
        ]
    with broker.admin() as admin:
        queues = admin.queues()
        consumption = admin.consumption()
        groups = admin.groups()
    every = [(t, q) for t in TOPICS for q in range(3)]
    assert [(q["topic"], q["queueId"]) for q in queues] == every
    assert all(q["minOffset"] == q["maxOffset"] == 0 for q in queues)
    assert [(r["group"], r["topic"], r["queueId"]) for r in consumption] == [
        ("g-a", "paged-01", 2),
        ("g-b", "paged-00", 0),
        ("g-b", "paged-22", 1),
    ]
    assert [g["name"] for g in groups] == GROUPS


@pytest.mark.parametrize(
    "query",
    [
        "/v1/topics?limit=0",
        "/v1/topics?limit=10001",
        "/v1/topics?after=a%00b",
        "/v1/groups?limit=-1",
        "/v1/queues?after=paged-01",
        "/v1/queues?after=paged-01:x",
        "/v1/consumption?after=g-a",
        "/v1/consumption?limit=many",
    ],
)
def test_bad_paging_is_refused(broker: LocalBroker, query: str) -> None:
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=15) as http:
        answer = http.get(query)
    assert answer.status_code == 422, (answer.status_code, answer.text)


def test_the_broker_says_what_its_code_understands(broker: LocalBroker) -> None:
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=15) as http:
        answer = http.get("/v1/broker")
    assert answer.status_code == 200, answer.text
    info = answer.json()
    assert info["features"] == sorted(f.value for f in SUPPORTED)
    assert {"topic-trace", "front-processes", "features"} <= set(info["features"])
    assert info["release"] == RELEASE and reported(info) == SUPPORTED
    assert info["role"] == "master" and info["group"]  # what it said before, still there

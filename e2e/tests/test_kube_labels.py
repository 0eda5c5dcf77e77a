"""Label and field selectors: both spellings, every operator."""

from __future__ import annotations

import pytest

from rocketcluster.e2e.kube.labels import (
    SelectorError,
    field_matches,
    from_label_selector,
    matches,
    parse_field_selector,
    parse_label_selector,
)

WEB = {"app": "web", "tier": "front"}
DB = {"app": "db"}


@pytest.mark.parametrize(
    ("text", "web", "db"),
    [
        ("", True, True),
        ("app=web", True, False),
        ("app==web", True, False),
        ("app!=web", False, True),
        ("tier", True, False),
        ("!tier", False, True),
        ("app in (web, api)", True, False),
        ("app notin (web)", False, True),
        ("app in (web,db),tier notin (back)", True, True),
        ("app=web,tier=back", False, False),
    ],
)
def test_query_string_selectors(text: str, web: bool, db: bool) -> None:
    selector = parse_label_selector(text)
    assert matches(selector, WEB) is web
    assert matches(selector, DB) is db


def test_label_selector_objects_and_the_empty_one() -> None:
    selector = from_label_selector(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }
    )
    assert matches(selector, WEB)
    assert not matches(selector, {**WEB, "canary": "1"})
    assert matches(from_label_selector({}), DB)
    with pytest.raises(SelectorError):
        from_label_selector({"matchExpressions": [{"key": "a", "operator": "Like"}]})


def test_malformed_selectors_are_refused() -> None:
    with pytest.raises(SelectorError):
        parse_label_selector("app in web")
    with pytest.raises(SelectorError):
        parse_field_selector("metadata.name~x")


def test_field_selectors() -> None:
    pod = {"metadata": {"name": "web-0", "namespace": "ns"}, "status": {"phase": "Running"}}
    assert field_matches(parse_field_selector("metadata.name=web-0"), pod)
    assert field_matches(parse_field_selector("metadata.namespace!=x,status.phase=Running"), pod)
    assert not field_matches(parse_field_selector("metadata.name==web-1"), pod)


def test_an_equality_is_a_set_requirement_of_one_value() -> None:
    assert parse_label_selector("app=web") == parse_label_selector("app in (web)")
    assert parse_label_selector("app==web") == parse_label_selector("app in (web)")
    assert parse_label_selector("app!=web") == parse_label_selector("app notin (web)")
    assert from_label_selector({"matchLabels": {"app": "web"}}) == parse_label_selector("app=web")

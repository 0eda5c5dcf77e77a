"""The HTML report from synthetic results with known content: the headline, every
section and plot, offline-ness, and missing, empty and mismatched tables."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rocketcluster.jobs.report import fmt, render_report, write_report
from rocketcluster.jobs.report.frames import severity
from rocketcluster.jobs.report.plots import MAX_LINE_POINTS, group_series
from rocketcluster.jobs.report.sample import (
    HOUR,
    MIN,
    SAMPLE_NOW,
    sample_results,
    sample_summary,
)
from rocketcluster.jobs.report.sss_section import unclean_times
from rocketcluster.jobs.report.svg import inline_svg
from rocketcluster.jobs.tables import (
    EVENTS,
    LAG_GROUPS,
    RESULT_SCHEMAS,
    RESULTS,
    SSS_GROUPS,
    SSS_INTERVALS,
    SSS_MASTERS,
    TIERING_CANDIDATES,
    column_names,
)

GENERATED = SAMPLE_NOW + 42_000
PLOTS = {
    "lag-messages",
    "lag-time",
    "sss-timeline-broker-0",
    "sss-timeline-broker-1",
    "sss-timeline-broker-2",
    "sss-timeline-broker-3",
    "tiering-savings",
}


def render(results: dict[str, Any], summary: dict[str, Any] | None = None) -> str:
    return render_report(results, summary or {}, cluster="demo", generated_at_ms=GENERATED)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return sample_results(SAMPLE_NOW)


@pytest.fixture(scope="module")
def page(results: dict[str, Any]) -> str:
    return render(results, sample_summary())


def text_of(fragment: str) -> str:
    """What a person reads: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def headline_items(page: str) -> list[str]:
    return [text_of(m) for m in re.findall(r'<li class="problem"[^>]*>(.*?)</li>', page)]


def plots(page: str) -> set[str]:
    return set(re.findall(r'<figure class="plot" data-plot="([^"]+)"', page))


def section(page: str, name: str) -> str:
    m = re.search(rf'<section id="{name}".*?</section>', page, re.S)
    assert m, f"no {name} section"
    return m.group(0)


def table_rows(page: str, name: str) -> list[str]:
    m = re.search(rf'<table class="sortable" data-table="{name}">(.*?)</table>', page, re.S)
    assert m, f"no {name} table"
    return re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(1).split("<tbody>", 1)[1], re.S)


def empty(name: str) -> Any:
    return pd.DataFrame(columns=column_names(RESULT_SCHEMAS[name]))


# -- the full report ----------------------------------------------------------------


def test_headline_lists_every_problem_worst_first(page: str) -> None:
    items = headline_items(page)
    expected = [
        "UNCLEAN broker-1: 1 election, 2 min 5 s without master, unclean 1",
        "ERR metrics-etl: ERR — committed offset 9,120 is past the queue's max offset",
        "STOP billing: STOP — no commit for 40 min",
        "STALL audit-log: STALL — committed offset stuck at 12,044",
        "FAILOVER broker-0: 1 election, 0.31 s without master, unclean 0",
        "REWIND replayer: REWIND — committed offset went back",
        "WARN orders-slow: WARN — lag grew at every snapshot",
        "FLAPS broker-2: 0 elections, 0 s without master, unclean 0, 3 flaps",
    ]
    assert len(items) == len(expected), items
    for got, want in zip(items, expected, strict=True):
        assert got.startswith(want), (got, want)
    assert not any("orders-fast" in i or "broker-3" in i for i in items)
    assert "8 problems, worst first" in page
    assert "<title>demo health: 8 problems</title>" in page


def test_headline_links_to_the_details(page: str) -> None:
    targets = re.findall(r'<li class="problem"[^>]*>.*?href="#([^"]+)"', page)
    assert len(targets) == 8
    for target in targets:
        assert f'id="{target}"' in page, target


def test_generation_time_and_window_in_utc(page: str) -> None:
    assert "generated 2026-01-01 12:00:42 UTC" in page
    assert "window 2026-01-01 11:00:00 → 12:00:00 UTC (1 h)" in page


def test_every_section_and_plot_is_there(page: str) -> None:
    for name in ("headline", "lag", "sss", "tiering", "summary"):
        assert f'data-section="{name}"' in page
    assert plots(page) == PLOTS
    for name in PLOTS:
        figure = re.search(rf'data-plot="{name}".*?</figure>', page, re.S)
        assert figure and "<svg" in figure.group(0) and "<path" in figure.group(0)
    # a "how to read this" box per section
    assert page.count('<details class="howto">') == 3


def test_axes_carry_units(page: str) -> None:
    # glyphs are paths; matplotlib keeps each text as a comment beside them
    for label in ("lag (messages)", "lag (minutes)", "time (UTC)", "replica"):
        assert f"<!-- {label} -->" in page, label
    assert "<!-- projected saving ($ per month) -->" in page


def test_nothing_is_fetched_from_anywhere(page: str) -> None:
    assert "http://" not in page and "https://" not in page
    refs = re.findall(r'\b(?:src|href)="([^"]*)"', page)
    assert refs, "no links at all?"
    assert all(r.startswith(("#", "data:")) for r in refs), refs
    assert "@import" not in page
    assert set(re.findall(r"url\((.)", page)) <= {"#"}
    assert "<style>" in page and "<script>" in page and "script src" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_ids_are_unique_across_the_inline_svgs(page: str) -> None:
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', page):
        assert ref in ids, ref


def test_lag_badges_colour_and_text(page: str) -> None:
    lag = section(page, "lag")
    for status, cls in (
        ("OK", "ok"),
        ("WARN", "warn"),
        ("STALL", "stall"),
        ("STOP", "stop"),
        ("REWIND", "rewind"),
        ("ERR", "err"),
    ):
        assert f'<span class="badge b-{cls}">{status}</span>' in lag
    cards = re.findall(r'<div class="card s-(\w+)" id="lag-([^"]+)"', lag)
    assert [c[1] for c in cards] == [
        "metrics-etl",
        "billing",
        "audit-log",
        "replayer",
        "orders-slow",
        "orders-fast",
    ]
    assert "in flight" in lag and "retry 3" in lag  # the stalled group retries


def test_queue_table_worst_first_with_reasons(page: str) -> None:
    rows = table_rows(page, "lag-queues")
    assert len(rows) == 14
    statuses = [re.search(r'class="badge[^"]*">([A-Z ]+)<', r).group(1) for r in rows]  # type: ignore[union-attr]
    assert [severity(s) for s in statuses] == sorted((severity(s) for s in statuses), reverse=True)
    stop = text_of(rows[1])
    assert "billing" in stop and "120,000" in stop and "40 min" in stop
    assert "the consumer is down" in stop


def test_sss_groups_and_replicas(page: str) -> None:
    sss = section(page, "sss")
    groups = [text_of(r) for r in table_rows(page, "sss-groups")]
    assert [g.split()[0] for g in groups] == ["broker-1", "broker-0", "broker-2", "broker-3"]
    assert groups[0].startswith("broker-1 UNCLEAN 1 1 1 2 min 5 s 1")
    assert groups[1].startswith("broker-0 FAILOVER 1 1 0 0.31 s 1")
    replicas = [text_of(r) for r in table_rows(page, "sss-replicas")]
    assert "broker-0 broker 0 45 min 75.0 % 1 1 1" in replicas
    assert "Master at the end of the window: broker 1 (epoch 3)." in sss


def test_unclean_election_is_placed_in_time(results: dict[str, Any]) -> None:
    start = SAMPLE_NOW - HOUR
    intervals = results[SSS_INTERVALS]
    masters = results[SSS_MASTERS]
    mine_i = intervals[intervals["broker_group"] == "broker-1"]
    mine_m = masters[masters["broker_group"] == "broker-1"]
    when = start + 32 * MIN + 5_000
    assert unclean_times(None, "broker-1", mine_i, mine_m, window_start=start, count=1) == [when]
    # the clean failover of broker-0 is not taken for an unclean one
    clean_i = intervals[intervals["broker_group"] == "broker-0"]
    clean_m = masters[masters["broker_group"] == "broker-0"]
    assert unclean_times(None, "broker-0", clean_i, clean_m, window_start=start, count=1) == []
    # the controller's events, when passed along, say it exactly
    events = pd.DataFrame(
        {"time": [when + 7], "broker_group": ["broker-1"], "unclean": [True]},
        columns=["time", "broker_group", "unclean"],
    )
    assert unclean_times(events, "broker-1", mine_i, mine_m, window_start=start, count=1) == [
        when + 7
    ]


def test_events_table_marks_unclean_elections(results: dict[str, Any]) -> None:
    events = pd.DataFrame(
        [
            {
                "time": SAMPLE_NOW - 20 * MIN,
                "broker_group": "broker-3",
                "unclean": True,
            }
        ]
    )
    sss = {k: v for k, v in results.items() if k.startswith("sss_")}
    page = render({**sss, EVENTS: events})
    # the marker is drawn; nothing else breaks
    assert plots(page) == {p for p in PLOTS if p.startswith("sss-")}


def test_tiering_sizes_ages_and_total(page: str) -> None:
    tiering = section(page, "tiering")
    assert "GiB" in tiering and " d " in tiering
    totals = re.search(r'<ul class="total" data-total="tiering">(.*?)</ul>', tiering, re.S)
    assert totals
    text = text_of(totals.group(1))
    assert re.search(
        r"Queues: 7 to move \([\d.]+ (GiB|TiB)\), total saving \$[\d,.]+ per month", text
    )
    assert "the tier already holds 3" in text
    rows = table_rows(page, "tiering-candidates")
    assert len(rows) == 20
    assert sum("IN TIER" in r for r in rows) == 3 and sum("LOCAL" in r for r in rows) == 17
    assert text_of(rows[0]).startswith("1 queue broker-1 payments 1 —")
    assert "could move to the tier, saving $" in page  # the headline's opportunity line


def test_summary_is_shown_as_written(page: str) -> None:
    summary = section(page, "summary")
    assert "price_per_gib_month" in summary and "unclean_elections" in summary


def test_same_input_same_file(results: dict[str, Any], page: str) -> None:
    assert render(results, sample_summary()) == page


def test_explicit_window_wins(results: dict[str, Any]) -> None:
    start = SAMPLE_NOW - 2 * HOUR
    page = render_report(
        {LAG_GROUPS: results[LAG_GROUPS]},
        {},
        cluster="demo",
        generated_at_ms=GENERATED,
        window=(start, SAMPLE_NOW),
    )
    assert "window 2026-01-01 10:00:00 → 12:00:00 UTC (2 h)" in page


def test_text_from_data_is_escaped(results: dict[str, Any]) -> None:
    groups = results[LAG_GROUPS].copy()
    groups.loc[0, "reason"] = "<script>alert(1)</script>"
    page = render_report(
        {LAG_GROUPS: groups},
        {},
        cluster="<b>prod</b>",
        generated_at_ms=GENERATED,
    )
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    assert "Health report: &lt;b&gt;prod&lt;/b&gt;" in page


def test_write_report(tmp_path: Path, page: str) -> None:
    path = write_report(tmp_path / "deep" / "report.html", page)
    assert path.read_text(encoding="utf-8") == page


# -- tables missing, empty, or of another version -------------------------------------


def test_no_results_at_all() -> None:
    page = render({})
    assert "Nothing checked" in page and "all healthy" not in page
    for job in ("consumer lag", "SyncStateSet history", "tiering candidates"):
        assert f"Not checked: {job} (the job was not run)." in page
    assert page.count('data-note="missing"') == 3
    assert plots(page) == set()
    assert 'data-section="summary"' not in page


def test_one_job_not_run(results: dict[str, Any]) -> None:
    partial = {k: v for k, v in results.items() if k != TIERING_CANDIDATES}
    page = render(partial)
    assert "The tiering job was not run" in section(page, "tiering")
    assert "Not checked: tiering candidates (the job was not run)." in page
    assert plots(page) == PLOTS - {"tiering-savings"}


def test_empty_tables_say_why() -> None:
    page = render({name: empty(name) for name in RESULTS})
    assert "No consumer groups had stats in the window" in page
    assert "No lag snapshots fell in the window" in page
    assert "No broker group had controller events in the window" in page
    assert "No queue or segment qualified" in page
    assert plots(page) == set()
    assert "All healthy" in page  # the jobs ran and found nothing wrong
    assert 'data-note="missing"' not in page


def test_all_healthy(results: dict[str, Any]) -> None:
    lag = results[LAG_GROUPS]
    sss = results[SSS_GROUPS]
    healthy = {
        LAG_GROUPS: lag[lag["status"] == "OK"],
        SSS_GROUPS: sss[sss["broker_group"] == "broker-3"],
        TIERING_CANDIDATES: empty(TIERING_CANDIDATES),
    }
    page = render(healthy)
    assert headline_items(page) == []
    assert 'class="headline healthy"' in page
    assert "✔ all healthy: 1 consumer group OK, 1 broker group stable" in page
    assert "<title>demo health: all healthy</title>" in page


def test_table_of_another_version(results: dict[str, Any]) -> None:
    lag = {k: v for k, v in results.items() if k.startswith("lag_")}
    page = render({**lag, LAG_GROUPS: results[LAG_GROUPS].drop(columns=["reason"])})
    assert 'data-note="bad"' in page
    assert "Not readable: lag_groups (columns missing: reason)." in page
    assert "lag-messages" in plots(page)  # the rest of the section still renders


# -- helpers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0 s"),
        (310, "0.31 s"),
        (4, "0.004 s"),
        (3_250, "3.25 s"),
        (45_000, "45 s"),
        (125_000, "2 min 5 s"),
        (3_600_000, "1 h"),
        (7_500_000, "2 h 5 min"),
        (90_061_000, "1 d 1 h"),
        (None, "—"),
        (float("nan"), "—"),
    ],
)
def test_duration(ms: float | None, text: str) -> None:
    assert fmt.duration(ms) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (512, "512 B"),
        (1536, "1.50 KiB"),
        (12_900_000, "12.3 MiB"),
        (5 << 30, "5.00 GiB"),
        (300 << 30, "300 GiB"),
        (3 << 40, "3.00 TiB"),
    ],
)
def test_size(n: int, text: str) -> None:
    assert fmt.size(n) == text


def test_other_formats() -> None:
    assert fmt.count(1234567) == "1,234,567"
    assert fmt.compact(12_345) == "12.3 k" and fmt.compact(950) == "950"
    assert fmt.compact(50_000) == "50 k" and fmt.compact(250_000_000) == "250 M"
    assert fmt.money(3.456) == "$3.46" and fmt.money(12_345.6, "€") == "€12,346"
    assert fmt.percent(0.75) == "75.0 %" and fmt.percent(0.99951) == "99.95 %"
    assert fmt.utc(0) == "1970-01-01 00:00:00 UTC"
    assert fmt.window(0, 86_400_000 + 1000) == (
        "1970-01-01 00:00:00 → 1970-01-02 00:00:01 UTC (1 d)"
    )
    assert fmt.time_unit(90_000)[0] == "s" and fmt.time_unit(40 * 60_000)[0] == "min"
    assert fmt.plural(1, "election") == "1 election" and fmt.plural(0, "flap") == "0 flaps"
    assert fmt.duration(pd.NA) == "—" and fmt.count(pd.NA) == "—"


def test_inline_svg_prefixes_ids_and_drops_the_prologue() -> None:
    doc = (
        '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
        '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n'
        '  "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
        '<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="432pt" height="144pt" '
        'viewBox="0 0 432 144" xmlns="http://www.w3.org/2000/svg" version="1.1">'
        "<metadata>x</metadata><defs><style>*{a:b}</style>"
        '<clipPath id="p1"><rect/></clipPath><path id="g1" d="M 0 0"/></defs>'
        '<g clip-path="url(#p1)"><use xlink:href="#g1"/></g></svg>'
    )
    out = inline_svg(doc, "lag-time")
    assert out.startswith('<svg width="432" height="144" viewBox="0 0 432 144"')
    assert "http" not in out and "<metadata>" not in out and "<style>" not in out
    assert 'id="lag-time-p1"' in out and "url(#lag-time-p1)" in out
    assert 'xlink:href="#lag-time-g1"' in out


def test_group_series_carries_queues_forward_and_thins_long_lines() -> None:
    # two queues snapshotted at different moments: the sum uses each one's latest value
    points = pd.DataFrame(
        {
            "time": [0, 10, 20, 30],
            "consumer_group": ["g"] * 4,
            "broker_group": ["b0", "b1", "b0", "b1"],
            "topic": ["t"] * 4,
            "queue_id": [0, 0, 0, 0],
            "lag_messages": [5, 7, 6, 1],
        }
    )
    (series,) = group_series(points, ["g"], "lag_messages", "sum")
    assert list(series.times) == [0, 10, 20, 30]
    assert list(series.values) == [5, 12, 13, 7]
    n = 10 * MAX_LINE_POINTS
    long = pd.DataFrame(
        {
            "time": range(n),
            "consumer_group": ["g"] * n,
            "broker_group": ["b0"] * n,
            "topic": ["t"] * n,
            "queue_id": [0] * n,
            "lag_messages": [1_000_000 if i == 4_321 else i % 7 for i in range(n)],
        }
    )
    (thin,) = group_series(long, ["g"], "lag_messages", "sum")
    assert len(thin.values) <= MAX_LINE_POINTS
    assert max(thin.values) == 1_000_000  # a peak survives the thinning


def test_broker_group_without_intervals_gets_a_sentence(results: dict[str, Any]) -> None:
    groups = results[SSS_GROUPS]
    extra = groups[groups["broker_group"] == "broker-3"].assign(broker_group="broker-9")
    sss = {k: v for k, v in results.items() if k.startswith("sss_")}
    page = render({**sss, SSS_GROUPS: pd.concat([groups, extra], ignore_index=True)})
    assert "No membership or master interval of broker-9 in the window." in page
    assert "sss-timeline-broker-9" not in plots(page)

"""The jobs' settings: defaults, both key spellings, YAML and JSON files, and errors that
say which file, where and what."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketcluster.api.cluster import HealthReportPrices
from rocketcluster.jobs.config import ConfigError, JobsConfig, PriceTable, load_config


def test_defaults_are_the_documented_examples() -> None:
    config = JobsConfig()
    assert (config.prices.local_gb_month, config.prices.object_gb_month) == (0.08, 0.023)
    assert config.prices.put_per_1000 == 0.0
    assert config.window_points == 10
    assert config.min_age_ms == 24 * 3_600_000
    assert config.history_ms == 24 * 3_600_000


def test_yaml_file_in_camel_case(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "prices:\n  localGbMonth: 0.1\n  objectGbMonth: 0.0125\n  retrievalPerGb: 0.01\n"
        "windowPoints: 6\nminAgeHours: 1.5\nhistoryHours: 48\n"
    )
    config = load_config(path)
    assert config.prices == PriceTable(
        local_gb_month=0.1, object_gb_month=0.0125, retrieval_per_gb=0.01
    )
    assert (config.window_points, config.min_age_ms, config.history_ms) == (
        6,
        5_400_000,
        48 * 3_600_000,
    )


def test_json_file_in_snake_case(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"prices": {"object_gb_month": 0.02}, "window_points": 3}))
    config = load_config(path)
    assert (config.prices.object_gb_month, config.prices.local_gb_month) == (0.02, 0.08)
    assert config.window_points == 3


def test_an_empty_file_means_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == JobsConfig()


def test_the_manifests_prices_fit(tmp_path: Path) -> None:
    # spec.healthReports.prices of a RocketCluster, copied as it is
    prices = HealthReportPrices(local_gb_month=0.1, object_gb_month=0.01)
    config = JobsConfig.model_validate({"prices": prices.model_dump(by_alias=True)})
    assert (config.prices.local_gb_month, config.prices.object_gb_month) == (0.1, 0.01)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prices: [1, 2\n", "not valid YAML/JSON at line 2"),
        ("- 1\n- 2\n", "expected a mapping of settings at the top, found list"),
        ("windowPoints: 0\n", "windowPoints: Input should be greater than or equal to 1"),
        ("prices:\n  localGbMonth: -1\n", "prices.localGbMonth: Input should be greater"),
        ("prices:\n  lcoalGbMonth: 0.1\n", "prices.lcoalGbMonth: unknown setting"),
        ("minAgeHours: soon\n", "minAgeHours: Input should be a valid number"),
    ],
)
def test_bad_files_say_where_and_why(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")

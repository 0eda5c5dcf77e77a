"""spec.brokers.diskFull from the manifest to the broker's store: ``reject`` by
default and then left out of the rendered process config (a broker of the previous
release, which forbids unknown fields, reads it); ``deleteOldest`` written and read
back into the store's config."""

from __future__ import annotations

import json
from pathlib import Path

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.cluster import DiskFullPolicy, RocketCluster
from rocketcluster.api.process_settings import broker_settings
from rocketcluster.broker.server import store_config
from rocketcluster.broker.store import DiskFullPolicy as StorePolicy


def _config(policy: str | None, tmp_path: Path) -> BrokerProcessConfig:
    brokers = {} if policy is None else {"diskFull": policy}
    cluster = RocketCluster.model_validate(
        {"metadata": {"name": "d"}, "spec": {"controller": {"replicas": 0}, "brokers": brokers}}
    )
    return BrokerProcessConfig.model_validate(
        {**broker_settings(cluster), "group": "d-broker-0", "data_dir": tmp_path}
    )


def test_reject_is_the_default_and_is_not_rendered(tmp_path: Path) -> None:
    config = _config(None, tmp_path)
    assert config.disk_full is DiskFullPolicy.REJECT
    rendered = json.loads(config.model_dump_json(by_alias=True))
    assert "diskFull" not in rendered
    assert store_config(config).disk_full is StorePolicy.REJECT


def test_delete_oldest_reaches_the_store(tmp_path: Path) -> None:
    config = _config("deleteOldest", tmp_path)
    rendered = json.loads(config.model_dump_json(by_alias=True))
    assert rendered["diskFull"] == "deleteOldest"
    again = BrokerProcessConfig.model_validate(rendered)
    assert store_config(again).disk_full is StorePolicy.DELETE_OLDEST

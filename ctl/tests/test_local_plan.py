"""``rocketctl local``'s rendering (pure: no processes): spec.tieredStorage reaches every
local broker's config as the operator renders it, with a relative posix.path made a
directory of the local cluster that every broker shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.ctl.cli import main
from rocketcluster.ctl.local.plan import (
    ProcessPlan,
    hosts_needed,
    local_tiered_storage,
    plan_cluster,
)
from rocketcluster.ctl.local.runtime import own_tier_directories
from rocketcluster.operator.render import brokers as rendered_brokers

REPO = Path(__file__).resolve().parents[2]


def _cluster(example: str, **tiered: Any) -> RocketCluster:
    data = load_manifest(REPO / "examples" / example).model_dump(mode="json", by_alias=True)
    data["spec"]["tieredStorage"].update(tiered)
    return RocketCluster.model_validate(data)


def _plans(cluster: RocketCluster, directory: Path) -> list[ProcessPlan]:
    hosts = [f"127.0.9.{i}" for i in range(1, hosts_needed(cluster) + 1)]
    return plan_cluster(cluster, directory, hosts)


def _broker_configs(cluster: RocketCluster, directory: Path) -> list[BrokerProcessConfig]:
    return [
        p.config for p in _plans(cluster, directory) if isinstance(p.config, BrokerProcessConfig)
    ]


def test_every_local_broker_gets_what_the_operator_renders(tmp_path: Path) -> None:
    cluster = _cluster("tiered-s3.yaml")
    configs = _broker_configs(cluster, tmp_path)
    assert len(configs) == 6
    operator = rendered_brokers.process_config(cluster, "archive-broker-0", 0)
    for config in configs:
        assert config.tiered_storage == cluster.spec.tiered_storage == operator.tiered_storage
    assert own_tier_directories(_plans(cluster, tmp_path), tmp_path) == set()


def test_a_relative_posix_path_is_a_directory_of_the_local_cluster(tmp_path: Path) -> None:
    cluster = _cluster("tiered-posix.yaml", posix={"path": "shared/tier"})
    configs = _broker_configs(cluster, tmp_path)
    assert len(configs) == 3
    for config in configs:
        posix = config.tiered_storage.posix
        assert posix is not None and posix.path == str(tmp_path / "shared" / "tier")
        # Everything else as the manifest says.
        unresolved = config.tiered_storage.model_copy(
            update={"posix": cluster.spec.tiered_storage.posix}
        )
        assert unresolved == cluster.spec.tiered_storage
    assert own_tier_directories(_plans(cluster, tmp_path), tmp_path) == {
        tmp_path / "shared" / "tier"
    }


def test_an_absolute_posix_path_is_taken_as_it_is_and_never_made(tmp_path: Path) -> None:
    share = tmp_path / "nfs"
    cluster = _cluster("tiered-posix.yaml", posix={"path": str(share)})
    spec = cluster.spec.tiered_storage
    assert local_tiered_storage(spec, tmp_path / "cluster") is spec
    plans = _plans(cluster, tmp_path / "cluster")
    assert own_tier_directories(plans, tmp_path / "cluster") == set()  # a missing mount shows


def test_a_path_under_dotdot_is_normalised(tmp_path: Path) -> None:
    spec = _cluster("tiered-posix.yaml", posix={"path": "../tier"}).spec.tiered_storage
    local = local_tiered_storage(spec, tmp_path / "cluster")
    assert local.posix is not None and local.posix.path == str(tmp_path / "tier")


def test_rocketctl_render_says_why_a_local_path_cannot_go_to_kubernetes(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "examples" / "tiered-posix.yaml").read_text())
    data["spec"]["tieredStorage"]["posix"]["path"] = "tier"
    manifest = tmp_path / "local.yaml"
    manifest.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["render", "-f", str(manifest)])
    assert result.exit_code == 1
    assert "posix.path 'tier' must be absolute in Kubernetes" in result.output


def test_a_tier_passed_as_an_override_is_resolved_alike(tmp_path: Path) -> None:
    """Tests hand brokers a tier through the overrides (short intervals, a moto
    endpoint): a relative path there is the cluster's directory too."""
    cluster = load_manifest(REPO / "examples" / "standalone.yaml")
    tier = {"enabled": True, "posix": {"path": "tier"}, "uploadIntervalSeconds": 0.2}
    hosts = [f"127.0.9.{i}" for i in range(1, hosts_needed(cluster) + 1)]
    (plan,) = plan_cluster(cluster, tmp_path, hosts, {"tiered_storage": tier})
    assert isinstance(plan.config, BrokerProcessConfig)
    posix = plan.config.tiered_storage.posix
    assert posix is not None and posix.path == str(tmp_path / "tier")
    assert plan.config.tiered_storage.upload_interval_seconds == 0.2

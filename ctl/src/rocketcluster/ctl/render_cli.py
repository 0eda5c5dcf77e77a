"""``rocketctl render``: every object the operator would create for a manifest, as
``helm template`` prints them — the dry-run and GitOps path."""

from __future__ import annotations

from pathlib import Path

import click

from rocketcluster.api.cluster import ManifestError, load_manifest


@click.command("render")
@click.option("-f", "--file", "manifest", type=click.Path(path_type=Path), required=True)
@click.option("-n", "--namespace", default=None, help="instead of metadata.namespace")
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
)
@click.option("--include-crds", is_flag=True, help="print the CustomResourceDefinitions first")
def render(manifest: Path, namespace: str | None, output: str, include_crds: bool) -> None:
    """Print the Kubernetes objects the operator renders for a RocketCluster manifest."""
    from rocketcluster.api.crdgen import RESOURCES, custom_resource_definition
    from rocketcluster.operator.render import render_cluster
    from rocketcluster.operator.render.output import to_json, to_yaml

    try:
        cluster = load_manifest(manifest)
    except ManifestError as exc:
        raise click.ClickException("invalid manifest: " + "; ".join(exc.problems)) from exc
    if namespace:
        cluster = cluster.model_copy(
            update={"metadata": cluster.metadata.model_copy(update={"namespace": namespace})}
        )
    try:
        objects = render_cluster(cluster)
    except ValueError as exc:  # what only the CRD refuses, e.g. a relative posix.path
        raise click.ClickException(f"cannot render for Kubernetes: {exc}") from exc
    if include_crds:
        objects = [custom_resource_definition(r) for r in RESOURCES] + objects
    if output == "json":
        click.echo(to_json(objects))
        return
    header = (
        f"# rocketctl render -f {manifest}: {len(objects)} objects for RocketCluster "
        f"{cluster.metadata.namespace}/{cluster.name} (ownerReferences are added by the "
        "operator, which knows the RocketCluster's uid)\n"
    )
    click.echo(to_yaml(objects, header), nl=False)

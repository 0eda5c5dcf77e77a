"""Container images of the deployables (``images/*/Containerfile``), built without a
daemon or a registry: a Debian base made with mmdebstrap, a wheelhouse made on the
host from uv.lock, ``buildah bud`` with chroot isolation. ``python -m
rocketcluster.e2e.images build`` is what ``make images`` runs."""

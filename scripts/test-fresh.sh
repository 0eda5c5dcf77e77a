#!/usr/bin/env bash
# `make test-fresh`: `make test` as a brand-new machine runs it. HEAD (committed work
# only) is cloned into a temporary directory, with ../shared beside it as CI has it,
# and `make test` runs there with an empty HOME, XDG_CACHE_HOME and buildah storage, so
# nothing an earlier run cached here (uv's wheels, kubectl and helm, built images,
# pip's cache) can hide a missing set-up step. Debian packages already installed stay:
# the Makefile installs what is missing of them the same way on a new machine.
#
# Prints the pytest summary, the skip guard's verdict and the wall time; exits with
# make's status. The whole log stays in $TEST_FRESH_LOG (/tmp/rocketcluster-test-fresh.log);
# KEEP=1 keeps the directory too (several GB) for a look afterwards.
set -euo pipefail

repo=$(git rev-parse --show-toplevel)
shared="$repo/../shared"
work=$(mktemp -d /tmp/rocketcluster-fresh.XXXXXX)
home="$work/home"
log="${TEST_FRESH_LOG:-/tmp/rocketcluster-test-fresh.log}"  # outlives the directory
mkdir -p "$home/.cache" "$work/containers"

cleanup() {
  status=$?
  if [ "${KEEP:-0}" = 1 ]; then
    echo "kept: $work"
  else
    # Containers and images of the fresh storage first, so no layer stays mounted.
    CONTAINERS_STORAGE_CONF="$work/containers/storage.conf" buildah rm --all >/dev/null 2>&1 || true
    CONTAINERS_STORAGE_CONF="$work/containers/storage.conf" buildah rmi --all --force >/dev/null 2>&1 || true
    # Whatever is still mounted below the directory (an interrupted build), deepest first.
    findmnt -rn -o TARGET | grep "^$work/" | sort -r | xargs -r umount 2>/dev/null || true
    rm -rf "$work" 2>/dev/null || echo "could not remove all of $work"
  fi
  exit "$status"
}
trap cleanup EXIT

echo "fresh clone of $(git -C "$repo" rev-parse --short HEAD) in $work"
git clone --quiet --no-local "$repo" "$work/rocketcluster"
git -C "$work/rocketcluster" checkout --quiet "$(git -C "$repo" rev-parse HEAD)"
if [ -d "$shared" ]; then
  ln -s "$(cd "$shared" && pwd)" "$work/shared"
fi

# An empty buildah storage of its own, with the driver a new machine's buildah takes
# (overlay; vfs copied whole layers: 230 s of CPU for the test images against 198 s).
# The cleanup removes its containers and images first, so no layer stays mounted.
cat >"$work/containers/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$work/containers/storage"
runroot = "$work/containers/run"
EOF

started=$(date +%s)
set +e
(
  cd "$work/rocketcluster"
  env -u ROCKETCLUSTER_BIN_CACHE -u ROCKETCLUSTER_IMAGE_CACHE -u VIRTUAL_ENV \
    -u UV_CACHE_DIR -u PIP_CACHE_DIR \
    HOME="$home" XDG_CACHE_HOME="$home/.cache" \
    CONTAINERS_STORAGE_CONF="$work/containers/storage.conf" \
    make test
) >"$log" 2>&1
status=$?
set -e
wall=$(( $(date +%s) - started ))

echo "---- the last lines of make test ($log) ----"
grep -E "^(FAILED|ERROR) |skip guard|NOT ALLOWED|ALLOWED TO SKIP|^[=]+ .*(passed|failed|error).* in " "$log" | tail -40 || true
grep -E "^chaos .*: (PASS|FAIL)" "$log" | tail -1 || true
tail -n 3 "$log"
printf 'make test from a fresh clone: exit %s, wall time %dm%02ds\n' "$status" $((wall / 60)) $((wall % 60))
exit "$status"

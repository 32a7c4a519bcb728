#!/usr/bin/env bash
# Build the sandbox image with no image registry: a Debian root filesystem made from
# Debian's packages with debootstrap, imported into the engine with `docker import`.
#
#   deploy/sandbox/build.sh                  # python3 with pandas, numpy and matplotlib
#   deploy/sandbox/build.sh --minimal        # python3 and its standard library only (what the
#                                            # test suite uses)
#   deploy/sandbox/build.sh --tag NAME       # default manus-rt-sandbox:latest
#
# Needs root (debootstrap), the `docker` client and an engine (DOCKER_HOST is honoured).
# With a registry at hand, deploy/sandbox/Dockerfile builds an equivalent image.
set -euo pipefail

tag="manus-rt-sandbox:latest"
packages="python3,python3-pandas,python3-numpy,python3-matplotlib"
while [ $# -gt 0 ]; do
  case "$1" in
    --minimal) packages="python3"; shift ;;
    --tag) tag="$2"; shift 2 ;;
    *) echo "usage: $0 [--minimal] [--tag NAME]" >&2; exit 2 ;;
  esac
done
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite="${DEBIAN_SUITE:-bookworm}"

for tool in debootstrap docker; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install debootstrap docker.io)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build.sh: debootstrap needs root" >&2; exit 1; }

rootfs=$(mktemp -d /tmp/manus-rt-sandbox-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "build.sh: debootstrap $suite with $packages (a few minutes)" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" > "$rootfs.log" 2>&1 \
  || { tail -20 "$rootfs.log" >&2; exit 1; }
rm -f "$rootfs.log"
mkdir -p "$rootfs/workspace"
# Keep the image small: package caches and docs are not needed at run time.
rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"* "$rootfs/usr/share/doc" "$rootfs/usr/share/man"
tar -C "$rootfs" -c . | docker import \
  --change 'WORKDIR /workspace' \
  --change 'ENV PYTHONUNBUFFERED=1' \
  --change 'CMD ["sleep", "2147483647"]' \
  - "$tag"
echo "build.sh: built $tag" >&2

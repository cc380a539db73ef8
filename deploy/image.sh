#!/usr/bin/env bash
# Builds the paycore image (deploy/Dockerfile) with podman, else docker: what `make image` runs.
#   IMAGE   the tag (default localhost/paycore:<git describe>)
#   BASE    the base both stages use; unset: the official python:3.11.7-slim-bookworm when it is
#           present or a registry serves it within PULL_TIMEOUT s (default 20), pinned to the
#           digest pulled, else the stand-in localhost/paycore-base:3.11-bookworm that
#           `make base-image` builds from Debian's packages
#   ENGINE  podman or docker (default: podman when installed, else docker)
# podman builds with --format docker: the OCI format has no HEALTHCHECK and podman drops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
engine=${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
image=${IMAGE:-localhost/paycore:$(git -C "$root" describe --always --dirty 2>/dev/null || echo dev)}
official=docker.io/library/python:3.11.7-slim-bookworm  # fully qualified: podman may refuse short names
standin=localhost/paycore-base:3.11-bookworm
export CONTAINERS_CONF=${CONTAINERS_CONF:-$root/deploy/containers.conf}  # runc, host ulimits
if [ -z "${BASE:-}" ]; then
  if "$engine" image inspect "$official" >/dev/null 2>&1 \
     || timeout "${PULL_TIMEOUT:-20}" "$engine" pull --quiet "$official" >/dev/null 2>&1; then
    BASE=$official
  else
    echo "no registry answers for $official: building on the stand-in $standin (make base-image)" >&2
    "$root/deploy/standins/build.sh" base
    BASE=$standin
  fi
fi
# The base by digest: a registry's tag can move between two builds, the digest of what was
# pulled cannot. A local image (the stand-in) is kept by name. The digest goes in a label either way.
if [ "$engine" = podman ]; then digest_of='{{.Digest}}'; else digest_of='{{index .RepoDigests 0}}'; fi
base_digest=$("$engine" image inspect --format "$digest_of" "$BASE" 2>/dev/null || true)
base_digest=${base_digest##*@}
case "$BASE" in
  *@*|localhost/*) ;;
  *) [ -n "$base_digest" ] && BASE=$BASE@$base_digest ;;
esac
args=(build -f "$root/deploy/Dockerfile" -t "$image" --build-arg "BASE=$BASE"
      --build-arg "BASE_DIGEST=${base_digest:-unknown}"
      --build-arg "VERSION=${VERSION:-0.1.0}"
      --build-arg "REVISION=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)")
[ "$engine" = podman ] && args+=(--format docker --network host)
# This host's CA bundle (a proxy's CA among them) for pip in the builder, mounted, never copied.
if [ "$engine" = podman ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  args+=(--volume /etc/ssl/certs:/etc/ssl/certs:ro --build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
fi
start=$(date +%s)
"$engine" "${args[@]}" "$root"
echo "$image built on $BASE in $(( $(date +%s) - start )) s;" \
     "$("$engine" image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"

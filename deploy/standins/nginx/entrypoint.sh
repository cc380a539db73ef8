#!/bin/sh
# The official nginx image's start-up, in short (its 15-local-resolvers.envsh and
# 20-envsubst-on-templates.sh): NGINX_LOCAL_RESOLVERS from /etc/resolv.conf when
# NGINX_ENTRYPOINT_LOCAL_RESOLVERS is set; each /etc/nginx/templates/X.template rendered to
# /etc/nginx/conf.d/X, substituting only variables that are set; then exec the command.
set -eu
if [ "${1:-}" = nginx ]; then
  if [ -n "${NGINX_ENTRYPOINT_LOCAL_RESOLVERS:-}" ]; then
    # The first nameserver only, unlike the official image's every one: podman lists the
    # network's own (which knows the service names) first and then the host's, and nginx asks
    # its resolvers in turn, so every other lookup of a service name would fail (a 502).
    NGINX_LOCAL_RESOLVERS=$(awk '$1=="nameserver" {if ($2 ~ ":") print "[" $2 "]"; else print $2; exit}' /etc/resolv.conf)
    export NGINX_LOCAL_RESOLVERS
  fi
  defined=$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/${\1}/p' | tr '\n' ' ')
  for template in /etc/nginx/templates/*.template; do
    [ -f "$template" ] || continue
    out=/etc/nginx/conf.d/$(basename "$template" .template)
    envsubst "$defined" < "$template" > "$out"
    echo "rendered $template to $out"
  done
fi
exec "$@"

#!/bin/bash
# The official postgres image's start-up, in short: as root, own $PGDATA and drop to `postgres`;
# on an empty $PGDATA, initdb with POSTGRES_USER/POSTGRES_PASSWORD, create POSTGRES_DB, run
# /docker-entrypoint-initdb.d/*.sql (psql) and *.sh (sourced, as the official image does) on a
# server listening on its socket only; then exec the server on every interface.
set -euo pipefail
if [ "${1:-}" != postgres ]; then exec "$@"; fi
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"  # exec: the server is PID 1
fi
export POSTGRES_USER=${POSTGRES_USER:-postgres}
export POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
    echo "POSTGRES_PASSWORD is required (or POSTGRES_HOST_AUTH_METHOD=trust), as for the official image" >&2
    exit 1
  fi
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    ${POSTGRES_INITDB_ARGS:-} >/dev/null
  printf '\nhost all all all %s\n' "${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start >/dev/null
  psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --host /var/run/postgresql)
  if [ "$POSTGRES_DB" != postgres ]; then
    echo 'CREATE DATABASE :"db"' | "${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" >/dev/null
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sh)  echo "running $f"; . "$f" ;;
      *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
      *) [ -e "$f" ] && echo "ignoring $f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql

#!/bin/sh
# Stand-in postgres entrypoint: on the first start, a cluster in $PGDATA (UTF8) whose superuser is
# $POSTGRES_USER with $POSTGRES_PASSWORD (password auth over TCP, trust on the local socket), and the
# database $POSTGRES_DB; then the server, listening on every interface.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "${1:-postgres}" != postgres ]; then
  exec "$@"
fi
[ "$#" -gt 0 ] && shift
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "stand-in postgres: POSTGRES_PASSWORD is required" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 \
    --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  # A private socket while the database is made: pg_isready (the health check) stays false until
  # the real server below is up.
  init_socket=$(mktemp -d)
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$init_socket" start
  if [ "$POSTGRES_DB" != postgres ]; then
    createdb -h "$init_socket" -U "$POSTGRES_USER" "$POSTGRES_DB"
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop
  rmdir "$init_socket"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"

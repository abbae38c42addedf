#!/bin/sh
# Stand-in redis entrypoint: `redis-server ARGS` with protected mode off (other containers of the
# deployment connect without a password, as with the official image); any other command as given.
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  exec redis-server --protected-mode no "$@"
fi
exec "$@"

#!/bin/sh
# A streaming replica of `postgres` (docker-compose.cluster.yml, docs/adr/0080): copied with
# pg_basebackup on its first start (PGPASSWORD is the primary's postgres password), then run as
# a hot standby that follows the primary.
set -eu
DATA=/var/lib/postgresql/data
if [ ! -f "$DATA/standby.signal" ]; then
  rm -rf "${DATA:?}"/*
  until pg_basebackup -h postgres -U postgres -D "$DATA" -X stream -R -c fast; do
    echo "replica: the primary is not ready for a base backup yet; retrying" >&2
    sleep 2
  done
fi
chmod 700 "$DATA"
exec postgres -D "$DATA" -c hot_standby=on -c max_connections=300

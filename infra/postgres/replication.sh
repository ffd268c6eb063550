#!/bin/sh
# The primary lets replicas in over the compose network with the postgres user's password
# (docker-compose.cluster.yml's postgres-replica, docs/adr/0080). Runs once, at initdb.
set -eu
echo 'host replication postgres all scram-sha-256' >>"$PGDATA/pg_hba.conf"

#!/bin/bash
# The compose broker's start-up (docker-compose.yml, docs/adr/0024): ./onto's configuration
# (server.properties + sasl.properties) adapted to the compose network, the SCRAM users written
# into the metadata log at the first format, then the broker. Without every password it refuses.
set -euo pipefail
KAFKA_HOME="${KAFKA_HOME:-/opt/kafka}"
TEMPLATES="${ONTO_KAFKA_TEMPLATES:-/etc/onto-kafka}"
DATA="${ONTO_KAFKA_DATA:-/tmp/kraft-combined-logs}"
CONFIG="${ONTO_KAFKA_CONFIG:-/tmp/onto-kafka/server.properties}"
ADMIN_CONFIG="$(dirname "$CONFIG")/admin.properties"
# A node of a three-broker cluster (docker-compose.cluster.yml, docs/adr/0053): its id, the quorum,
# the cluster id every node is formatted with, and the names it is reached by.
NODE_ID="${ONTO_KAFKA_NODE_ID:-}"
QUORUM_VOTERS="${ONTO_KAFKA_QUORUM_VOTERS:-}"
CLUSTER_ID="${ONTO_KAFKA_CLUSTER_ID:-}"
ADVERTISED_HOST="${ONTO_KAFKA_ADVERTISED_HOST:-kafka}"
HOST_PORT="${ONTO_KAFKA_HOST_PORT:-29092}"
if [[ -n $NODE_ID && ( ! $NODE_ID =~ ^[1-9][0-9]*$ || -z $QUORUM_VOTERS || -z $CLUSTER_ID ) ]]; then
  echo "kafka: a cluster node needs ONTO_KAFKA_NODE_ID (a number), ONTO_KAFKA_QUORUM_VOTERS and ONTO_KAFKA_CLUSTER_ID" >&2
  exit 1
fi

declare -A PASSWORDS=(
  [admin]="${KAFKA_ADMIN_PASSWORD:-}" [controller]="${KAFKA_CONTROLLER_PASSWORD:-}"
  [control]="${KAFKA_CONTROL_PASSWORD:-}" [data]="${KAFKA_DATA_PASSWORD:-}"
  [intelligence]="${KAFKA_INTELLIGENCE_PASSWORD:-}"
)
for user in "${!PASSWORDS[@]}"; do
  # sed and the JAAS line take the password as it is: hex, as openssl rand -hex makes it
  if [[ ! ${PASSWORDS[$user]} =~ ^[A-Za-z0-9]{24,}$ ]]; then
    echo "kafka: the password of $user must be at least 24 letters or digits: openssl rand -hex 24" >&2
    exit 1
  fi
done

umask 077
mkdir -p "$(dirname "$CONFIG")"
{
  cat "$TEMPLATES/server.properties"
  [[ -z $NODE_ID ]] || cat "$TEMPLATES/cluster.properties"
  cat "$TEMPLATES/sasl.properties"
  # Other containers reach the broker as kafka:9092 (a cluster node as its own name); the host
  # (docker-compose.infra-ports.yml) on 29092, a cluster node on the port compose gives it.
  cat <<PROPERTIES
listeners=SASL_PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093,HOST://0.0.0.0:$HOST_PORT
advertised.listeners=SASL_PLAINTEXT://$ADVERTISED_HOST:9092,HOST://localhost:$HOST_PORT
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,HOST:SASL_PLAINTEXT
listener.name.host.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
PROPERTIES
} | sed -e 's|@KAFKA_PORT@|9092|g' -e 's|@CONTROLLER_PORT@|9093|g' -e "s|@LOG_DIRS@|$DATA|g" \
  -e "s|@NODE_ID@|$NODE_ID|g" -e "s|@QUORUM_VOTERS@|$QUORUM_VOTERS|g" \
  -e "s|@ADMIN_PASSWORD@|${PASSWORDS[admin]}|g" -e "s|@CONTROLLER_PASSWORD@|${PASSWORDS[controller]}|g" >"$CONFIG"
printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-512 \
  "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"${PASSWORDS[admin]}\";" \
  >"$ADMIN_CONFIG"

if [[ ! -f $DATA/meta.properties ]]; then
  scram=()
  for user in admin control data intelligence; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=${PASSWORDS[$user]}]")
  done
  # Every node of a cluster is formatted with the one cluster id it is given.
  "$KAFKA_HOME/bin/kafka-storage.sh" format -t "${CLUSTER_ID:-$("$KAFKA_HOME/bin/kafka-storage.sh" random-uuid)}" -c "$CONFIG" "${scram[@]}"
fi
exec "$KAFKA_HOME/bin/kafka-server-start.sh" "$CONFIG"

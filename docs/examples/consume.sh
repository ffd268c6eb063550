#!/usr/bin/env bash
# Reads an onto topic from the beginning with kcat and prints one JSON line per event, deduplicated
# by event id, in partition order: what a consumer in any language does (docs/consumers.md).
#   usage: consume.sh BROKERS TOPIC [CE_TYPE]
#   e.g.   consume.sh 127.0.0.1:9092 onto.changes.objects object.updated
set -euo pipefail
brokers=$1 topic=$2 type=${3:-}

# -J: each record as JSON, with its headers as [name, value, name, value, ...]; -e: stop at the end.
kcat -C -b "$brokers" -t "$topic" -o beginning -e -q -J |
  jq -c --arg type "$type" '
    (.headers // [] | [range(0; length; 2) as $i | {key: .[$i], value: .[$i + 1]}] | from_entries) as $h
    # Route on the CloudEvents headers without parsing the value.
    | select($type == "" or $h.ce_type == $type)
    | (.payload | fromjson) as $event
    | {id: $event.event_id, type: $event.type, subject: $h.ce_subject, partition, offset, world: $event.world_id, payload: $event.payload}' |
  # At least once: a record may come twice; the event id says which are the same event.
  jq -cs 'unique_by(.id) | sort_by(.partition, .offset) | .[]'

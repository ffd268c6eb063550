#!/usr/bin/env node
// Reads an onto topic from the beginning with kafkajs and prints one JSON line per event,
// deduplicated by event id, in partition order: the Node twin of consume.sh, and one that can log
// in to the authenticated broker of ./onto up (docs/consumers.md).
//   usage: node consume.mjs BROKERS TOPIC [CE_TYPE]
//   env:   KAFKA_GROUP (your group, under the prefix your user may use), and for an authenticated
//          broker KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD (SCRAM-SHA-512)
import { Kafka, logLevel } from 'kafkajs';

const [brokers, topic, type = ''] = process.argv.slice(2);
const {
  KAFKA_GROUP: groupId = `example-${process.pid}`,
  KAFKA_SASL_USERNAME: username,
  KAFKA_SASL_PASSWORD: password,
} = process.env;
const kafka = new Kafka({
  clientId: 'onto-consume-example',
  brokers: brokers.split(','),
  logLevel: logLevel.NOTHING,
  ...(username ? { sasl: { mechanism: 'scram-sha-512', username, password } } : {}),
});

// Read up to the end the topic has now, like kcat -e.
const admin = kafka.admin();
await admin.connect();
const ends = new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, BigInt(p.high)]));
await admin.disconnect();

const seen = new Map();
const consumer = kafka.consumer({ groupId });
// Refused (a group outside your prefix, a topic you may not read): say why and stop.
consumer.on(consumer.events.CRASH, ({ payload }) => {
  if (payload.restart) return; // a passing fault: kafkajs starts again
  process.stderr.write(`${payload.error.message}\n`);
  process.exit(1);
});
await consumer.connect();
await consumer.subscribe({ topics: [topic], fromBeginning: true });
const done = new Set([...ends].filter(([, high]) => high === 0n).map(([p]) => p));
await new Promise((resolve) => {
  if (done.size === ends.size) resolve();
  consumer.run({
    eachMessage: async ({ partition, message }) => {
      const h = Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)]));
      // Route on the CloudEvents headers without parsing the value.
      if (type === '' || h.ce_type === type) {
        const event = JSON.parse(message.value.toString());
        // At least once: a record may come twice; the event id says which are the same event.
        if (!seen.has(event.event_id)) {
          seen.set(event.event_id, {
            id: event.event_id,
            type: event.type,
            subject: h.ce_subject,
            partition,
            offset: message.offset,
            world: event.world_id,
            payload: event.payload,
          });
        }
      }
      if (BigInt(message.offset) + 1n >= (ends.get(partition) ?? 0n)) done.add(partition);
      if (done.size === ends.size) resolve();
    },
  });
});
await consumer.disconnect();
const lines = [...seen.values()].sort(
  (a, b) => a.partition - b.partition || Number(BigInt(a.offset) - BigInt(b.offset)),
);
for (const line of lines) process.stdout.write(`${JSON.stringify(line)}\n`);

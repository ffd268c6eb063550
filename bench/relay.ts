/**
 * The messaging kernel's throughput, in one run on one broker:
 *   1. Kafka's own ProducerPerformance: N records of the outbox's average body size, acks=all;
 *   2. the outbox relay draining N pending rows to Kafka;
 *   3. the inbox consumer applying them (inbox row + version-checked upsert per event).
 * Beside them, the client floor: the same client producing and consuming the same records from
 * memory. Prints the rates and the ratios relay/raw (goal ≥ 0.65), relay/client floor (≥ 0.9)
 * and consumer/relay (goal ≥ 1.0).
 *
 *   ./onto bench relay [rows]      (default 200000)
 *
 * RELAY_CONCURRENCY (claim loops, 2), RELAY_PRODUCERS (2) and CONSUMER_CONCURRENCY (partitions
 * consumed at once, 6) vary the set-up; on the 2-core VM three or four loops were within the
 * noise of two (67-72k rows/s with two, 67-82k with three or four, three runs each).
 */
import { fileURLToPath } from 'node:url';
import {
  cloudEventHeaders,
  InboxConsumer,
  kernelMigrations,
  newEvent,
  Outbox,
  type OutboxMessage,
  OutboxRelay,
  TOPICS,
  upsertIfNewer,
} from '@onto/shared';
import { createTestDatabase, createTestTopics, testBroker, testEndpoints, testLogger } from '@onto/shared/testing';
import pg from 'pg';
import { fmt, kafkaTool, report, until } from './lib/harness.js';

const rows = Number(process.argv[2] ?? 200_000);
const cpuMicros = (u: NodeJS.CpuUsage) => u.user + u.system;
const objects = 20_000;
const endpoints = testEndpoints();
const db = await createTestDatabase(endpoints.postgresUrl, [
  kernelMigrations,
  { directory: fileURLToPath(new URL('./migrations', import.meta.url)), table: 'bench_migrations' },
]);
const topics = await createTestTopics(endpoints.kafkaBrokers, 6);
const pool = new pg.Pool({ connectionString: db.url, max: 16 });
const topic = `${topics.prefix}onto.changes.objects`;
const broker = testBroker(endpoints.kafkaBrokers);

try {
  // --- the outbox, filled beforehand (not timed): N object changes over 20,000 objects
  let bytes = 0;
  const fillStart = performance.now();
  for (let start = 0; start < rows; start += 1000) {
    const chunk: OutboxMessage[] = [];
    for (let i = start; i < Math.min(start + 1000, rows); i++) {
      const pk = `obj-${i % objects}`;
      const version = Math.floor(i / objects) + 1;
      const event = newEvent({
        type: 'object.updated',
        worldId: 'bench',
        key: `item/${pk}`,
        version,
        producer: 'data',
        producerSeq: i + 1,
        payload: { pk, after: { name: `item ${pk}`, amount: i % 977, status: 'open', tags: ['a', 'b'] } },
      });
      const message = { event, key: TOPICS['onto.changes.objects'].key({ worldId: 'bench', objectType: 'item', pk }) };
      chunk.push(message as OutboxMessage);
      bytes += JSON.stringify(event).length;
    }
    await new Outbox(pool, topics.prefix).add(chunk);
  }
  const recordSize = Math.round(bytes / rows);
  console.log(
    `outbox filled with ${fmt(rows)} rows of ~${recordSize} B in ${fmt((performance.now() - fillStart) / 1000, 1)} s`,
  );

  // --- 1. Kafka's own producer, same broker, same record size, acks=all
  const admin = await broker.admin();
  const rawTopic = `${topics.prefix}bench.raw`;
  await admin.ensureTopics([{ name: rawTopic, partitions: 6 }]);
  const perf = await kafkaTool('org.apache.kafka.tools.ProducerPerformance', [
    '--topic',
    rawTopic,
    '--num-records',
    String(rows),
    '--record-size',
    String(recordSize),
    '--throughput',
    '-1',
    '--producer-props',
    `bootstrap.servers=${endpoints.kafkaBrokers}`,
    'acks=all',
    'enable.idempotence=true',
  ]);
  const rawLine =
    perf
      .trim()
      .split('\n')
      .filter((l) => l.includes('records sent'))
      .at(-1) ?? '';
  const raw = Number(rawLine.match(/([\d.]+) records\/sec/)?.[1]);
  console.log(`ProducerPerformance: ${rawLine.trim()}`);

  // --- 1b. the client floor: the same client sending the same records (key, body, headers)
  // straight from memory, 4 requests of 1,000 in flight, then consuming them in a group of its
  // own. What the relay and the consumer could reach if onto's own work cost nothing.
  const floorTopic = `${topics.prefix}bench.floor`;
  await admin.ensureTopics([{ name: floorTopic, partitions: 6 }]);
  const records = (
    await pool.query<{ event_id: string; partition_key: string; body: string }>(
      'SELECT event_id::text, partition_key, body FROM outbox ORDER BY id',
    )
  ).rows.map((r) => ({
    key: r.partition_key,
    value: r.body,
    headers: { 'onto-event-id': r.event_id, ...cloudEventHeaders(r.event_id, r.body) },
  }));
  const floorProducer = await broker.producer();
  const floorStart = performance.now();
  const floorCpu = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      for (let at = next; at < records.length; at = next) {
        next += 1000;
        await floorProducer.send([{ topic: floorTopic, messages: records.slice(at, at + 1000) }]);
      }
    }),
  );
  const floorProduceRate = rows / ((performance.now() - floorStart) / 1000);
  const floorProduceCpuUs = cpuMicros(process.cpuUsage(floorCpu));
  await floorProducer.disconnect();
  const floorConsumer = await broker.consumer({
    groupId: `${topics.prefix}bench-floor`,
    topics: [floorTopic],
    fromBeginning: true,
    partitionsConsumedConcurrently: 6,
  });
  let floorConsumed = 0;
  let floorFirst = 0;
  let floorConsumeCpu: NodeJS.CpuUsage | undefined;
  void floorConsumer.run(async (batch) => {
    if (floorFirst === 0) {
      floorFirst = performance.now();
      floorConsumeCpu = process.cpuUsage();
    }
    for (const m of batch.messages) if (m.value !== null && m.headers.ce_id) floorConsumed++;
  });
  await until('the client floor consumed', async () => floorConsumed >= rows, 600_000, 20);
  const floorConsumeRate = rows / ((performance.now() - floorFirst) / 1000);
  const floorConsumeCpuUs = cpuMicros(process.cpuUsage(floorConsumeCpu));
  await floorConsumer.disconnect();
  console.log(
    `client floor: produce ${fmt(floorProduceRate)} records/s (${fmt(floorProduceCpuUs / rows, 1)} µs CPU), consume ${fmt(floorConsumeRate)} records/s (${fmt(floorConsumeCpuUs / rows, 1)} µs CPU)`,
  );

  // --- 2. the relay
  const concurrency = Number(process.env.RELAY_CONCURRENCY ?? 2);
  const producers = await Promise.all(
    Array.from({ length: Number(process.env.RELAY_PRODUCERS ?? 2) }, () => broker.producer()),
  );
  // Acknowledged records are counted in the process, as the consumer's effects are below; the
  // end is confirmed in SQL once they are all in.
  let acknowledged = 0;
  const counted = producers.map((p) => ({
    send: async (batches: Parameters<typeof p.send>[0]) => {
      const delivered = await p.send(batches);
      for (const b of batches) acknowledged += b.messages.length;
      return delivered;
    },
    disconnect: () => p.disconnect(),
  }));
  const relay = new OutboxRelay({ pool, producer: counted, logger: testLogger, batchSize: 1000, concurrency });
  const pending = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox_pending')).rows[0]?.n ?? 0;
  const relayStart = performance.now();
  const relayCpu = process.cpuUsage();
  await relay.start();
  await until('the outbox drained', async () => acknowledged >= rows && (await pending()) === 0, 600_000, 20);
  const relaySeconds = (performance.now() - relayStart) / 1000;
  const relayCpuUs = cpuMicros(process.cpuUsage(relayCpu));
  await relay.stop();
  await Promise.all(producers.map((p) => p.disconnect()));
  const relayRate = rows / relaySeconds;

  // --- 2b. the same drain with a producer that does nothing: what PostgreSQL alone allows
  await pool.query('TRUNCATE outbox_sent');
  await pool.query('INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM outbox');
  const nullRelay = new OutboxRelay({
    pool,
    producer: { send: async () => [], disconnect: async () => {} },
    logger: testLogger,
    batchSize: 1000,
    concurrency,
  });
  const pgStart = performance.now();
  let drained = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, loop) => {
      for (let n = await nullRelay.publishBatch(loop); n > 0; n = await nullRelay.publishBatch(loop)) drained += n;
    }),
  );
  const pgRate = drained / ((performance.now() - pgStart) / 1000);

  // --- 3. the inbox consumer: inbox row + version-checked upsert, one transaction per batch.
  // Progress is counted in the process (an applied batch may still roll back, so the end is
  // confirmed in SQL): a count(*) over the growing inbox every 250 ms would compete with it.
  let handed = 0;
  let firstEffect = 0;
  const consumer = new InboxConsumer({
    name: 'bench',
    topics: [topic],
    broker,
    pool,
    logger: testLogger,
    partitionsConsumedConcurrently: Number(process.env.CONSUMER_CONCURRENCY ?? 6),
    apply: async (tx, events) => {
      if (firstEffect === 0) firstEffect = performance.now();
      handed += events.length;
      await upsertIfNewer(
        tx,
        'items',
        ['world', 'key'],
        'version',
        events.map(({ event }) => ({
          world: event.world_id,
          key: event.key,
          version: event.version,
          value: event.payload,
        })),
      );
    },
  });
  const applied = async () =>
    (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM inbox WHERE consumer = 'bench'`)).rows[0]?.n ?? 0;
  const consumerStart = performance.now();
  const consumerCpu = process.cpuUsage();
  await consumer.start();
  await until('every event applied', async () => handed >= rows && (await applied()) >= rows, 600_000, 20);
  const consumerEnd = performance.now();
  const consumerCpuUs = cpuMicros(process.cpuUsage(consumerCpu));
  const consumerSeconds = (consumerEnd - consumerStart) / 1000;
  const steadySeconds = (consumerEnd - firstEffect) / 1000;
  await consumer.stop();
  const consumerRate = rows / consumerSeconds;
  const steadyRate = rows / steadySeconds;
  const items = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM items')).rows[0]?.n;
  await admin.disconnect();

  console.log('');
  console.log(`| what | records/s | ratio | goal |`);
  console.log(`|---|---:|---:|---:|`);
  console.log(`| Kafka ProducerPerformance (acks=all, ${recordSize} B) | ${fmt(raw)} | | |`);
  console.log(
    `| outbox relay, ${fmt(rows)} rows | ${fmt(relayRate)} | ${(relayRate / raw).toFixed(2)} × raw | ≥ 0.65 |`,
  );
  console.log(
    `| the client floor: kafkajs producing the same records from memory | ${fmt(floorProduceRate)} | ${(floorProduceRate / raw).toFixed(2)} × raw | |`,
  );
  console.log(`| outbox relay ÷ the client floor | | ${(relayRate / floorProduceRate).toFixed(2)} × floor | ≥ 0.9 |`);
  console.log(`| relay's PostgreSQL side alone (claim + mark, publish skipped) | ${fmt(pgRate)} | | |`);
  console.log(`| the client floor: kafkajs consuming them (first record on) | ${fmt(floorConsumeRate)} | | |`);
  console.log(
    `| inbox consumer (inbox + upsert) | ${fmt(consumerRate)} | ${(consumerRate / relayRate).toFixed(2)} × relay | ≥ 1.0 |`,
  );
  console.log(
    `| inbox consumer from its first effect (group join excluded) | ${fmt(steadyRate)} | ${(steadyRate / relayRate).toFixed(2)} × relay | |`,
  );
  console.log(
    `(Node CPU per record: relay ${fmt(relayCpuUs / rows, 1)} µs, consumer ${fmt(consumerCpuUs / rows, 1)} µs; the client floor ${fmt(floorProduceCpuUs / rows, 1)} µs producing, ${fmt(floorConsumeCpuUs / rows, 1)} µs consuming)`,
  );
  console.log(
    `(consumer wrote ${fmt(items ?? 0)} items; relay ${fmt(relaySeconds, 1)} s, consumer ${fmt(consumerSeconds, 1)} s of which ${fmt(consumerSeconds - steadySeconds, 1)} s before its first effect)`,
  );
  report('relay', {
    'relay ÷ ProducerPerformance': relayRate / raw,
    'relay ÷ client floor': relayRate / floorProduceRate,
    'consumer ÷ relay': consumerRate / relayRate,
    'relay CPU µs/record': relayCpuUs / rows,
    'consumer CPU µs/record': consumerCpuUs / rows,
  });
} finally {
  await pool.end();
  await topics.drop();
  await db.drop();
}

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type EventEnvelope, encodeEvent, validateEvent } from '../src/events/envelope.js';
import { uuidv7 } from '../src/ids/uuidv7.js';
import type { ApplyEffects } from '../src/inbox/consumer.js';
import type { Broker, IncomingMessage, OutgoingMessage, Producer } from '../src/kafka/broker.js';
import { TOPICS } from '../src/kafka/topics.js';
import { kernelMigrations } from '../src/kernel-migrations.js';
import type { OutboxMessage } from '../src/outbox/outbox.js';
import type { OutboxRelay } from '../src/outbox/relay.js';
import {
  committedToEnd,
  createTestDatabase,
  createTestTopics,
  eventually,
  testBroker,
  testEndpoints,
} from '../src/testing/index.js';

export const kernelTracks = [
  kernelMigrations,
  { directory: fileURLToPath(new URL('./migrations', import.meta.url)), table: 'kernel_test_migrations' },
];

/** A database with the kernel's and the tests' tables, and a topic prefix, for one test file. */
export async function kernelFixture() {
  const endpoints = testEndpoints();
  const db = await createTestDatabase(endpoints.postgresUrl, kernelTracks);
  const topics = await createTestTopics(endpoints.kafkaBrokers, 3);
  const pool = new pg.Pool({ connectionString: db.url, max: 10 });
  return {
    endpoints,
    db,
    pool,
    prefix: topics.prefix,
    topic: (name: string) => `${topics.prefix}${name}`,
    async close() {
      await pool.end();
      await topics.drop();
      await db.drop();
    },
  };
}

export type KernelFixture = Awaited<ReturnType<typeof kernelFixture>>;

/** The kernel fixture and a producer on its broker; the fixture's `close()` disconnects the producer first. */
export async function kernelFixtureWithProducer() {
  const fx = await kernelFixture();
  const producer = await testBroker(fx.endpoints.kafkaBrokers)
    .producer()
    .catch(async (error: unknown) => {
      await fx.close();
      throw error;
    });
  const closeFixture = fx.close;
  fx.close = async () => {
    await producer.disconnect();
    await closeFixture();
  };
  return { fx, producer };
}

/** An object change of `key` at `version`: the event the tests pass through the kernel. */
export function orderEvent(key: string, version: number, extra: { causedBy?: string; world?: string } = {}) {
  const worldId = extra.world ?? 'w1';
  return {
    // A synthetic event: the envelope is checked, the payload is the tests' own, not object.updated's
    // published schema (docs/adr/0020), so newEvent's contract check is not asked.
    event: validateEvent({
      event_id: uuidv7(),
      type: 'object.updated',
      world_id: worldId,
      key: `order/${key}`,
      version,
      caused_by: extra.causedBy ?? null,
      causal_order: 0,
      producer: 'data',
      producer_seq: version,
      occurred_at: new Date().toISOString(),
      payload: { key, seq: version, amount: version * 10 },
    }) as EventEnvelope & { type: 'object.updated' },
    key: TOPICS['onto.changes.objects'].key({ worldId, objectType: 'order', pk: key }),
  } satisfies OutboxMessage<'object.updated'>;
}

/**
 * One sentinel per partition key of `messages`: an order event of the same key, sent after them, so
 * that it lands behind them on their partition. Its effect is recorded like any other.
 */
export function sentinelsBehind(messages: ReturnType<typeof orderEvent>[]): OutgoingMessage[] {
  const byKey = new Map(messages.map((m) => [m.key, m]));
  return [...byKey.values()].map((m) => {
    const sentinel = orderEvent(String(m.event.payload.key), 1_000_000, { world: m.event.world_id });
    return { key: sentinel.key, value: encodeEvent(sentinel.event) };
  });
}

/** The effect of an order event: one row in `effects`, and a version-checked balance. */
export const recordEffects: ApplyEffects = async (tx, events) => {
  await tx.query(
    `INSERT INTO effects (event_id, key, seq)
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[])`,
    [
      events.map((e) => e.event.event_id),
      events.map((e) => String(e.event.payload.key)),
      events.map((e) => Number(e.event.payload.seq)),
    ],
  );
};

export async function effectCounts(pool: pg.Pool): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ event_id: string; n: number }>(
    'SELECT event_id::text, count(*)::int AS n FROM effects GROUP BY event_id',
  );
  return new Map(rows.map((r) => [r.event_id, r.n]));
}

/**
 * Reads a topic from the beginning with a group of its own until `expected` records arrived, then
 * on to the end of every partition, so that a record beyond the expected shows up too: call it once
 * nothing that is tested still produces to the topic.
 */
export async function readTopic(
  broker: Broker,
  topic: string,
  expected: number,
  timeoutMs = 30_000,
): Promise<IncomingMessage[]> {
  const received: IncomingMessage[] = [];
  const groupId = `reader-${Math.random().toString(36).slice(2)}`;
  const consumer = await broker.consumer({ groupId, topics: [topic], fromBeginning: true });
  try {
    await consumer.run(async (batch) => {
      received.push(...batch.messages);
    });
    await eventually(
      () => `${expected} records on ${topic} (have ${received.length})`,
      () => received.length >= expected,
      { timeoutMs },
    );
    await committedToEnd(broker, groupId, topic, { timeoutMs });
    return received;
  } finally {
    await consumer.disconnect();
  }
}

/**
 * Calls `idle` after every claim of `relay` that found nothing to publish: the loop that made it
 * then sleeps until it is woken or its poll is due.
 */
export function onIdleClaim(relay: OutboxRelay, idle: () => void): void {
  const claim = relay.publishBatch.bind(relay);
  relay.publishBatch = async (loop) => {
    const published = await claim(loop);
    if (published === 0) idle();
    return published;
  };
}

/** Wraps a real producer so a test can make its next sends fail. */
export function faultyProducer(inner: Producer) {
  let failures = 0;
  return {
    failNext(n: number) {
      failures = n;
    },
    async send(batches: Parameters<typeof inner.send>[0]) {
      if (failures > 0) {
        failures--;
        throw new Error('injected: broker unavailable');
      }
      return inner.send(batches);
    },
    disconnect: () => inner.disconnect(),
  };
}

/** Runs a fixture under tsx, from the TypeScript sources; `output()` is what it printed. */
export function spawnFixture(name: 'relay-process' | 'consumer-process', env: Record<string, string>) {
  const file = fileURLToPath(new URL(`./fixtures/${name}.ts`, import.meta.url));
  const child = spawn(process.execPath, ['--conditions=@onto/source', '--import', 'tsx', file], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

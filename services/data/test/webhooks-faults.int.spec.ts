import { eventually, type PrivateKafka, startPrivateKafka, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';
import { Receiver } from './webhook-receiver.js';

/**
 * Issue 31's chaos-run stall, step by step: webhook deliveries under the faults the chaos run
 * injects (PostgreSQL connections terminated, the broker stopped and started again), with a
 * version of every object written before each fault, so that a fault meets deliveries queued,
 * claimed, in flight and being recorded. Every version must reach the receiver, per object in
 * order, each event once as a new event (a repeat carries the same webhook-id). Before ADR 79,
 * 2 runs in 7 on a busy machine stopped at the third or fourth version: the data-webhooks
 * consumer had crashed with a non-retriable error while the broker came back, and kafkajs did not
 * start it again (consumer-revival.int.spec.ts makes that crash deterministically).
 */
const KEYS = 6;
const W = 'hookfaults';
const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, n: { type: 'integer' } },
};

describe('webhook deliveries through PostgreSQL and broker faults', () => {
  let kafka: PrivateKafka;
  let s: Stack;
  const receiver = new Receiver();
  const admin = new pg.Pool({ connectionString: testEndpoints().postgresUrl, max: 1 });
  admin.on('error', () => {});
  const acknowledged = new Map<string, number[]>();

  beforeAll(async () => {
    await receiver.up();
    kafka = await startPrivateKafka();
    s = await dataStack({
      kafkaBrokers: kafka.brokers,
      partitions: 3,
      dataEnv: { ONTO_WEBHOOK_ALLOW_HOSTS: '127.0.0.1', WEBHOOK_RETRY_BASE_MS: '100', WEBHOOK_RETRY_MAX_MS: '800' },
    });
    await s.identityKnown();
    await s.world(W, { objectTypes: { Item } });
  }, 240_000);
  afterAll(async () => {
    await s?.close();
    await kafka?.close();
    await receiver.down();
    await admin.end();
  });

  /** One version of every object; a write refused by the fault is tried again. */
  async function round(n: number): Promise<void> {
    await Promise.all(
      Array.from({ length: KEYS }, async (_, k) => {
        const pk = `o-${k}`;
        const res = await eventually(`${pk} written`, async () => {
          const r = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Item/${pk}`, { body: { properties: { n } } });
          return r.statusCode < 300 ? r : undefined;
        });
        const versions = acknowledged.get(pk) ?? [];
        versions.push(res.json().version);
        acknowledged.set(pk, versions);
      }),
    );
  }

  /** What the chaos run's PostgreSQL fault does: every connection to data's database ends. */
  async function terminateData(): Promise<void> {
    const db = new URL(s.data.databaseUrl).pathname.slice(1);
    await admin.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [db],
    );
  }

  it('delivers every version, per object in order, once each as a new event', async () => {
    const made = await s.dataCall('PUT', `/v1/worlds/${W}/webhooks/all`, {
      body: { url: receiver.url('/all'), events: ['object.created', 'object.updated'] },
    });
    expect(made.statusCode, made.body).toBe(201);
    receiver.secrets.set('/all', [made.json().secret]);
    // A slow receiver keeps deliveries in flight (claimed, leased, not yet recorded) when a fault comes.
    receiver.delays.set('/all', 150);
    let n = 0;
    await round(n++);
    for (const fault of ['postgres', 'broker', 'postgres', 'postgres-and-broker', 'postgres'] as const) {
      await round(n++);
      await new Promise((r) => setTimeout(r, 100));
      if (fault === 'postgres' || fault === 'postgres-and-broker') await terminateData();
      if (fault === 'broker' || fault === 'postgres-and-broker') {
        await kafka.stop();
        await round(n++); // accepted into the outbox while the broker is away
        await new Promise((r) => setTimeout(r, 3000));
        await kafka.start();
      }
      await round(n++);
    }
    const total = [...acknowledged.values()].reduce((sum, v) => sum + (v.at(-1) ?? 0), 0);
    const firstSeen = () => {
      const seen = new Map<string, { pk: string; version: number }>();
      for (const r of receiver.on('/all')) {
        if (!seen.has(r.id)) seen.set(r.id, { pk: r.body.data.payload.pk, version: r.body.data.version });
      }
      return [...seen.values()];
    };
    await eventually('every version delivered', async () => firstSeen().length >= total, { timeoutMs: 120_000 }).catch(
      () => {},
    );
    const got = new Map<string, number[]>();
    for (const { pk, version } of firstSeen()) got.set(pk, [...(got.get(pk) ?? []), version]);
    expect(receiver.failedSignatures).toBe(0);
    for (const [pk, versions] of acknowledged) {
      // Every version data holds (a write whose answer the fault lost may have made one more than
      // acknowledged), in order, each once as a new event.
      const last = (await s.dataCall('GET', `/v1/worlds/${W}/objects/Item/${pk}`)).json().version as number;
      expect(last).toBeGreaterThanOrEqual(versions.at(-1) ?? 0);
      expect(got.get(pk), pk).toEqual(Array.from({ length: last }, (_, v) => v + 1));
    }
  }, 420_000);
});

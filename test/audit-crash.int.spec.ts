import { OutboxRelay } from '@onto/shared';
import { buildTestService, type TestService, testBroker, testLogger } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as data from '../services/data/src/app.js';
import { ConfigSchema as DataConfig } from '../services/data/src/config.js';
import { dataStack, type Stack } from '../services/data/test/stack.js';

/**
 * A crash between a change's commit and the relay's publication loses no audit record and makes
 * no second one (docs/adr/0084, the kernel's guarantee, once end to end): data commits an object
 * PUT while its relay is down; a relay then publishes the record and dies before marking it sent;
 * data starts again on the same database and its relay publishes the record a second time.
 * control's audit trail holds it exactly once.
 */

const W = 'audit-crash';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};

describe('the audit record of a change outlives a crash before its publication', () => {
  let s: Stack;
  let restarted: TestService<unknown> | undefined;

  beforeAll(async () => {
    s = await dataStack();
    await s.world(W, { objectTypes: { Order } });
  }, 120_000);
  afterAll(async () => {
    await restarted?.close();
    await s?.close();
  });

  const recordsOf = async (requestId: string) => {
    const res = await s.controlCall('GET', `/v1/audit?requestId=${requestId}`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json().records as { action: string; world: string; target: string; result: string }[];
  };
  const pendingAudit = async (requestId: string) =>
    (
      await s.data.app.pg.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM outbox_pending p JOIN outbox o USING (id)
          WHERE o.topic LIKE '%onto.audit' AND (o.body::jsonb -> 'payload' ->> 'requestId') = $1`,
        [requestId],
      )
    ).rows[0]?.n;

  it('publishes it after the restart, and control keeps it once', async () => {
    // data's relay dies: the write commits, its record waits in the outbox.
    await s.data.app.relay.stop();
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o-1`, {
      body: { properties: { id: 'o-1', amount: 1 } },
    });
    expect(put.statusCode, put.body).toBe(201);
    const requestId = String(put.headers['x-request-id']);
    expect(await pendingAudit(requestId)).toBe(1);

    // A relay publishes it and dies before marking it sent.
    const producer = await testBroker(s.data.env.KAFKA_BROKERS as string).producer();
    try {
      const crashing = new OutboxRelay({
        pool: s.data.app.pg,
        producer,
        logger: testLogger,
        faults: {
          afterPublish: () => {
            throw new Error('injected: the relay died after the broker acknowledged');
          },
        },
      });
      await expect(crashing.publishBatch()).rejects.toThrow('injected');
    } finally {
      await producer.disconnect();
    }
    expect(await pendingAudit(requestId)).toBe(1);

    // data starts again on the same database: its relay publishes the record again.
    restarted = (await buildTestService(
      { schema: DataConfig, app: data.default, migrations: data.migrations } as never,
      {
        ONTO_TOPIC_PREFIX: s.prefix,
        KAFKA_BROKERS: s.data.env.KAFKA_BROKERS as string,
        DATABASE_URL: s.data.databaseUrl,
      },
    )) as TestService<unknown>;
    await s.until('the record sent', async () => ((await pendingAudit(requestId)) === 0 ? true : undefined));

    // On the topic twice; in control's trail once, after a later record of the same world.
    const later = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o-2`, {
      body: { properties: { id: 'o-2', amount: 2 } },
    });
    expect(later.statusCode, later.body).toBe(201);
    const laterId = String(later.headers['x-request-id']);
    const onTopic = await s.records('onto.audit', (seen) =>
      seen.some((r) => (r.event.payload as { requestId: string }).requestId === laterId),
    );
    expect(onTopic.filter((r) => (r.event.payload as { requestId: string }).requestId === requestId)).toHaveLength(2);
    await s.until('control has the later record', async () =>
      (await recordsOf(laterId)).length > 0 ? true : undefined,
    );
    expect(await recordsOf(requestId)).toMatchObject([
      { action: 'object.put', world: W, target: 'Order/o-1', result: 'created' },
    ]);
  }, 120_000);
});

import type { IncomingMessage, Producer } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';

const Account = {
  displayName: 'Account',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string', required: true },
    balance: { type: 'integer' },
  },
};
const W = 'cdcw';
const MAPPINGS = [
  {
    source: 'pg1',
    world: W,
    objectType: 'Account',
    primaryKey: 'account_id',
    properties: { name: 'full_name', balance: 'bal' },
  },
];

type Row = { account_id: string; full_name: unknown; bal?: unknown };
const change = (op: 'c' | 'u' | 'd' | 'r', lsn: number, row: Row, wrap = false) => {
  const body = {
    op,
    before: op === 'd' || op === 'u' ? row : null,
    after: op === 'd' ? null : row,
    source: { connector: 'postgresql', table: 'accounts', lsn, ts_ms: 1_700_000_000_000 + lsn },
    ts_ms: 1_700_000_000_000 + lsn,
  };
  return {
    key: JSON.stringify({ account_id: row.account_id }),
    value: JSON.stringify(wrap ? { payload: body } : body),
  };
};

describe('cdc consumer', () => {
  let s: Stack;
  let producer: Producer;
  let topic: string;
  const { kafkaBrokers } = testEndpoints();
  const admin = () => testBroker(kafkaBrokers).admin();

  beforeAll(async () => {
    s = await dataStack({ dataEnv: { CDC_MAPPINGS: JSON.stringify(MAPPINGS) } });
    topic = `${s.prefix}cdc.raw.pg1`;
    const a = await admin();
    await a.ensureTopics([
      { name: topic, partitions: 1 },
      { name: `${topic}.dlq`, partitions: 1 },
    ]);
    await a.disconnect();
    await s.world(W, { objectTypes: { Account } });
    producer = await testBroker(kafkaBrokers).producer();
  });
  afterAll(async () => {
    await producer?.disconnect();
    const a = await admin();
    await a.deleteTopics([topic, `${topic}.dlq`]).catch(() => {});
    await a.disconnect();
    await s?.close();
  });

  const get = (pk: string) => s.dataCall('GET', `/v1/worlds/${W}/objects/Account/${pk}`);
  const events = async (pk: string) =>
    (
      await s.data.app.pg.query<{ type: string }>(
        `SELECT body::jsonb->>'type' AS type FROM outbox WHERE partition_key = $1 ORDER BY id`,
        [`${W}/Account/${pk}`],
      )
    ).rows.map((r) => r.type);

  it('applies c, u, d, r; skips duplicates and older changes; dead-letters an invalid row and goes on', async () => {
    const a1 = { account_id: 'a', full_name: 'Ann', bal: 1 };
    const a2 = { account_id: 'a', full_name: 'Ann', bal: 2 };
    const a15 = { account_id: 'a', full_name: 'Ann (old)', bal: 15 };
    const c1 = { account_id: 'c', full_name: 'Cid' };
    const messages = [
      change('c', 10, a1, true),
      change('r', 5, { account_id: 'b', full_name: 'Bob', bal: 7 }),
      change('c', 11, c1),
      change('u', 20, a2),
      change('d', 30, c1, true),
      // Duplicates, and an older update of a arriving after the newer one.
      change('u', 15, a15),
      change('c', 10, a1),
      change('u', 20, a2),
      change('c', 11, c1),
      // A row the schema refuses (the required name is null, the balance a string), then a good one.
      change('c', 12, { account_id: 'bad', full_name: null, bal: 'x' }),
      { key: 'junk', value: '{"not":"debezium"}' },
      change('c', 13, { account_id: 'e', full_name: 'Eve' }),
    ];
    await producer.send([{ topic, messages }]);

    await s.until('e applied', async () => ((await get('e')).statusCode === 200 ? true : undefined), 20_000);
    expect((await get('a')).json()).toEqual({
      type: 'Account',
      pk: 'a',
      version: 2,
      properties: { id: 'a', name: 'Ann', balance: 2 },
    });
    expect((await get('b')).json()).toMatchObject({ version: 1, properties: { id: 'b', name: 'Bob', balance: 7 } });
    expect((await get('c')).statusCode).toBe(404);
    expect((await get('bad')).statusCode).toBe(404);
    expect(await events('a')).toEqual(['object.created', 'object.updated']);
    expect(await events('c')).toEqual(['object.created', 'object.deleted']);
    expect(await events('b')).toEqual(['object.created']);
    const { rows } = await s.data.app.pg.query<{ pk: string; position: string }>(
      'SELECT pk, position::text FROM cdc_positions WHERE world_id = $1 ORDER BY pk',
      [W],
    );
    expect(rows).toEqual([
      { pk: 'a', position: '20' },
      { pk: 'b', position: '5' },
      { pk: 'c', position: '30' },
      { pk: 'e', position: '13' },
    ]);

    // The DLQ holds the refused row and the record that was no change event, with their errors.
    const dead: IncomingMessage[] = [];
    const reader = await testBroker(kafkaBrokers).consumer({
      groupId: `${s.prefix}dlq-reader`,
      topics: [`${topic}.dlq`],
      maxWaitTimeMs: 100,
    });
    await reader.run(async (batch) => {
      dead.push(...batch.messages);
    });
    try {
      await s.until('two dead letters', async () => (dead.length >= 2 ? true : undefined), 15_000);
    } finally {
      await reader.disconnect();
    }
    expect(dead.map((d) => d.headers['onto-original-offset'])).toEqual(['9', '10']);
    expect(JSON.parse(dead[0]?.headers['onto-errors'] ?? '[]')).toEqual(
      expect.arrayContaining([
        { path: '/properties/name', message: 'is required' },
        { path: '/properties/balance', message: expect.any(String) },
      ]),
    );
    expect(dead[1]?.headers['onto-error']).toMatch(/not a change event/);
    expect(dead.map((d) => d.headers['onto-error-type'])).toEqual(['CdcRefusal', 'CdcRefusal']);
    expect(dead[0]?.headers['onto-consumer']).toBe(`${s.prefix}data-cdc`);

    // A later change of a deleted object recreates it.
    await producer.send([{ topic, messages: [change('c', 40, { account_id: 'c', full_name: 'Cid again' })] }]);
    await s.until('c recreated', async () => ((await get('c')).statusCode === 200 ? true : undefined), 15_000);
    expect((await get('c')).json()).toMatchObject({ version: 3, properties: { name: 'Cid again' } });
  }, 40_000);
});

import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from './stack.js';

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, tier: { type: 'string' } },
};
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' }, note: { type: 'string' } },
};
const W = 'trips';

/**
 * How many round trips to PostgreSQL the change consumer's transaction takes per batch: on the
 * target machine they are the cost (docs/adr/0010, "Round trips"). Each batch's transaction is
 * recorded from the inbox statement that begins it (with the batch's prepared statements) to its
 * COMMIT.
 */
describe('round trips of a change batch', () => {
  let s: IntelligenceStack;
  /** Per transaction of the change consumer: the text of each round trip. */
  const batches: string[][] = [];

  beforeAll(async () => {
    s = await intelligenceStack();
    const pool = intel();
    const open = new Map<pg.PoolClient, string[]>();
    const seen = new WeakSet<pg.PoolClient>();
    pool.on('acquire', (client) => {
      if (seen.has(client)) return;
      seen.add(client);
      const query = client.query as (...a: unknown[]) => unknown;
      client.query = ((...args: unknown[]) => {
        const first = args[0] as string | { text?: string };
        const text = typeof first === 'string' ? first : (first?.text ?? '');
        const trips = open.get(client);
        trips?.push(text);
        // Every inbox consumer begins so; the change consumer's batch advances the watermarks
        // (with its first statements, docs/adr/0033).
        if (text.startsWith('BEGIN;\nWITH batch AS')) open.set(client, [text]);
        if (trips && /(^|\n)COMMIT$/.test(text)) {
          if (trips.some((t) => t.includes('INSERT INTO data_watermarks'))) batches.push(trips);
          open.delete(client);
        }
        if (/^ROLLBACK/.test(text)) open.delete(client);
        return query.apply(client, args);
      }) as typeof client.query;
    });
    await s.world(W, {
      objectTypes: { Customer, Order },
      linkTypes: { placed: { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' } },
    });
    for (const [name, body] of Object.entries({
      doubled: { objectType: 'Order', expression: 'amount * 2' },
      vip: { objectType: 'Customer', expression: 'tier == "gold"' },
      total: {
        objectType: 'Customer',
        expression: 'agg.total',
        aggregates: { total: { function: 'sum', linkType: 'placed', property: 'amount' } },
      },
    })) {
      const res = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/${name}`, { body });
      expect(res.statusCode, res.body).toBeLessThan(300);
    }
  }, 120_000);
  afterAll(async () => s?.close());

  const intel = (): pg.Pool => {
    if (!s.intelligence) throw new Error('no intelligence');
    return s.intelligence.app.pg;
  };

  /** Writes through data; answers the trips of the change batch(es) that applied it. */
  async function tripsOf(write: () => Promise<{ statusCode: number; body: string }>, done: () => Promise<boolean>) {
    await s.until('the recompute jobs of the definitions', async () => {
      const { rows } = await intel().query('SELECT 1 FROM recompute_jobs WHERE finished_at IS NULL');
      return rows.length === 0 ? true : undefined;
    });
    const from = batches.length;
    const res = await write();
    expect(res.statusCode, res.body).toBeLessThan(300);
    await s.until('the change applied', async () => ((await done()) ? true : undefined));
    return batches.slice(from).map((b) => b.length);
  }

  const derived = async (type: string, pk: string, name: string) => {
    const { rows } = await intel().query<{ value: unknown }>(
      'SELECT value FROM derived_values WHERE world_id = $1 AND object_type = $2 AND pk = $3 AND name = $4',
      [W, type, pk, name],
    );
    return rows[0]?.value;
  };
  const put = (type: string, pk: string, properties: Record<string, unknown>) => () =>
    s.dataCall('PUT', `/v1/worlds/${W}/objects/${type}/${pk}`, { body: { properties } });

  const stored = async (type: string, pk: string, property: string) => {
    const { rows } = await intel().query<{ v: unknown }>(
      'SELECT properties->$4 AS v FROM rm_objects WHERE world_id = $1 AND type = $2 AND pk = $3',
      [W, type, pk, property],
    );
    return rows[0]?.v;
  };

  it('two for a change read only by derived properties of its own object, or by nothing', async () => {
    // Created: vip from what the read-model statement answered, total's aggregate in one more trip.
    expect(
      await tripsOf(
        put('Customer', 'c1', { id: 'c1', tier: 'gold' }),
        async () => (await derived('Customer', 'c1', 'total')) === 0,
      ),
    ).toEqual([3]);
    expect(await derived('Customer', 'c1', 'vip')).toBe(true);
    // BEGIN with the inbox, the lock, versions and read model; the values, watermark and COMMIT.
    expect(
      await tripsOf(
        put('Customer', 'c1', { id: 'c1', tier: 'silver' }),
        async () => (await derived('Customer', 'c1', 'vip')) === false,
      ),
    ).toEqual([2]);
    // An order: doubled, and the links that would carry its amount to a customer's total (none).
    expect(
      await tripsOf(
        put('Order', 'o1', { id: 'o1', amount: 5 }),
        async () => (await derived('Order', 'o1', 'doubled')) === 10,
      ),
    ).toEqual([3]);
    expect(
      await tripsOf(
        put('Order', 'o1', { id: 'o1', amount: 5, note: 'n' }),
        async () => (await stored('Order', 'o1', 'note')) === 'n',
      ),
    ).toEqual([2]);
  });

  it('one more for a link: the near object and its aggregate read together', async () => {
    await tripsOf(put('Customer', 'c2', { id: 'c2' }), async () => (await derived('Customer', 'c2', 'total')) === 0);
    await tripsOf(
      put('Order', 'o2', { id: 'o2', amount: 5 }),
      async () => (await derived('Order', 'o2', 'doubled')) === 10,
    );
    expect(
      await tripsOf(
        () => s.dataCall('PUT', `/v1/worlds/${W}/links/placed/c2/o2`),
        async () => (await derived('Customer', 'c2', 'total')) === 5,
      ),
    ).toEqual([3]);
    // Across the link: doubled, the live links from o2, then c2 and its total together.
    expect(
      await tripsOf(
        put('Order', 'o2', { id: 'o2', amount: 7 }),
        async () => (await derived('Customer', 'c2', 'total')) === 7,
      ),
    ).toEqual([4]);
    expect(await derived('Order', 'o2', 'doubled')).toBe(14);
  });
});

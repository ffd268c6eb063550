import { isDeepStrictEqual } from 'node:util';
import { type EventEnvelope, newEvent, parseEvent } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    creditLimit: { type: 'integer' },
    rate: { type: 'double' },
  },
};
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};
const shop = {
  objectTypes: { Customer, Order },
  linkTypes: { placed: { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' } },
};

interface Read {
  version: number;
  properties: Record<string, unknown>;
  derived: Record<
    string,
    {
      value: unknown;
      error: { message: string } | null;
      stale: boolean;
      computedAt: string;
      sourceVersion: number;
      sourceSeq: number;
      sources: Record<string, unknown>;
    }
  >;
}

describe('read model, derived properties and rules', () => {
  let s: IntelligenceStack;
  let token = '';

  beforeAll(async () => {
    // Reads carrying a data token wait long enough here to never answer 503 on a slow machine.
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
  }, 120_000);
  afterAll(async () => s?.close());

  const put = async (world: string, type: string, pk: string, properties: Record<string, unknown>) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/${type}/${pk}`, { body: { properties } });
    expect(res.statusCode, res.body).toBeLessThan(300);
    token = String(res.headers['x-consistency-token']);
    return res;
  };
  const link = async (world: string, from: string, to: string, method: 'PUT' | 'DELETE' = 'PUT') => {
    const res = await s.dataCall(method, `/v1/worlds/${world}/links/placed/${from}/${to}`);
    expect(res.statusCode, res.body).toBeLessThan(300);
    token = String(res.headers['x-consistency-token']);
  };
  const del = async (world: string, type: string, pk: string) => {
    const res = await s.dataCall('DELETE', `/v1/worlds/${world}/objects/${type}/${pk}`);
    expect(res.statusCode, res.body).toBe(204);
    token = String(res.headers['x-consistency-token']);
  };
  /**
   * The object as intelligence holds it, once it has applied data up to the last write — up to
   * its watermark, that is: writes travel several partitions, so callers wait for what they expect.
   */
  const read = async (world: string, type: string, pk: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/objects/${type}/${pk}`, {
      headers: { 'x-consistency-token': token },
    });
    if (res.statusCode === 404) return undefined;
    expect(res.statusCode, res.body).toBe(200);
    return res.json() as Read;
  };
  /** Waits until the object satisfies `ok`; returns it. */
  const readUntil = (world: string, type: string, pk: string, what: string, ok: (o: Read) => boolean) =>
    s.until(`${world} ${type} ${pk}: ${what}`, async () => {
      const o = await read(world, type, pk);
      return o && ok(o) ? o : undefined;
    });
  /** Waits until the object's derived values are these; returns the object. */
  const expectDerived = (world: string, type: string, pk: string, expected: Record<string, unknown>) =>
    readUntil(world, type, pk, JSON.stringify(expected), (o) =>
      Object.entries(expected).every(([name, v]) => isDeepStrictEqual(o.derived[name]?.value, v)),
    );
  /** Waits until the definition's recompute over existing objects is done. */
  const settled = (world: string, path: string) =>
    s.until(`${path} recomputed`, async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${world}/${path}`);
      const body = res.json();
      const progress = body.recompute ?? body.evaluation;
      return progress && !progress.pending ? body : undefined;
    });
  const define = async (world: string, name: string, body: Record<string, unknown>) => {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/derived-properties/${name}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
    expect(res.headers['x-consistency-token']).toMatch(/^data=\d+$/);
    await settled(world, `derived-properties/${name}`);
    return res.json();
  };

  it('a derived value follows a property change and a linked object’s change, through derived-of-derived', async () => {
    const W = 'follow';
    await s.world(W, shop);
    await put(W, 'Customer', 'c1', { id: 'c1', creditLimit: 100 });
    await put(W, 'Order', 'o1', { id: 'o1', amount: 30 });
    await put(W, 'Order', 'o2', { id: 'o2', amount: 50 });
    await link(W, 'c1', 'o1');
    await link(W, 'c1', 'o2');

    // Defined over existing objects: computed by the recompute job.
    const total = await define(W, 'orderTotal', {
      objectType: 'Customer',
      expression: 'agg.sum',
      aggregates: { sum: { function: 'sum', linkType: 'placed', property: 'amount' } },
      maxStalenessMs: 5000,
    });
    expect(total).toMatchObject({ version: 1, state: 'valid', dependsOn: { linkTypes: ['placed'] } });
    await define(W, 'headroom', { objectType: 'Customer', expression: 'self.creditLimit - derived.orderTotal' });
    await define(W, 'overLimit', { objectType: 'Customer', expression: 'derived.headroom < 0' });
    let c1 = await expectDerived(W, 'Customer', 'c1', { orderTotal: 80, headroom: 20, overLimit: false });
    expect(c1.derived.orderTotal).toMatchObject({ error: null, stale: false, sourceVersion: 1 });

    // A linked object's change recomputes the aggregate, then what reads it.
    await put(W, 'Order', 'o2', { id: 'o2', amount: 90 });
    c1 = await expectDerived(W, 'Customer', 'c1', { orderTotal: 120, headroom: -20, overLimit: true });
    // The source versions: the customer's own, and the highest data write among the inputs.
    const o2 = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o2`);
    const o2Seq = Number(String(o2.headers['x-consistency-token']).replace('data=', ''));
    expect(c1.derived.orderTotal?.sourceSeq).toBe(o2Seq);
    expect(c1.derived.orderTotal?.sources).toMatchObject({ agg: { sum: { count: 2, seq: o2Seq } } });

    // An own property change recomputes only what reads it.
    const before = c1.derived.orderTotal?.computedAt;
    await put(W, 'Customer', 'c1', { id: 'c1', creditLimit: 500 });
    c1 = await expectDerived(W, 'Customer', 'c1', { headroom: 380, overLimit: false });
    expect(c1.derived.orderTotal?.computedAt).toBe(before);
    expect(c1.derived.headroom?.sourceVersion).toBe(2);

    // A link deleted, then a linked object deleted: the aggregate follows both.
    await link(W, 'c1', 'o1', 'DELETE');
    await expectDerived(W, 'Customer', 'c1', { orderTotal: 90 });
    await put(W, 'Order', 'o3', { id: 'o3', amount: 7 });
    await link(W, 'c1', 'o3');
    await expectDerived(W, 'Customer', 'c1', { orderTotal: 97 });
    await del(W, 'Order', 'o2');
    await expectDerived(W, 'Customer', 'c1', { orderTotal: 7, headroom: 493 });

    // A new object gets its values at once, before any link.
    await put(W, 'Customer', 'c2', { id: 'c2', creditLimit: 5 });
    await expectDerived(W, 'Customer', 'c2', { orderTotal: 0, headroom: 5, overLimit: false });
    // The derived-only view answers the same values.
    const only = await s.intelCall('GET', `/v1/worlds/${W}/objects/Customer/c2/derived`, {
      headers: { 'x-consistency-token': token },
    });
    expect(only.statusCode, only.body).toBe(200);
    expect(only.json().derived.headroom.value).toBe(5);
  });

  it('aggregates across links in the other direction and over derived values of the linked objects', async () => {
    const W = 'across';
    await s.world(W, shop);
    await define(W, 'doubled', { objectType: 'Order', expression: 'self.amount * 2' });
    await define(W, 'customerLimit', {
      objectType: 'Order',
      expression: 'agg.limit',
      aggregates: { limit: { function: 'max', linkType: 'placed', property: 'creditLimit' } },
    });
    await define(W, 'doubledSum', {
      objectType: 'Customer',
      expression: 'agg.s + agg.n',
      aggregates: {
        s: { function: 'sum', linkType: 'placed', derived: 'doubled' },
        n: { function: 'count', linkType: 'placed' },
      },
    });
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 10 });
    await put(W, 'Order', 'a', { id: 'a', amount: 1 });
    await put(W, 'Order', 'b', { id: 'b', amount: 2 });
    await link(W, 'c', 'a');
    await link(W, 'c', 'b');
    await expectDerived(W, 'Customer', 'c', { doubledSum: 6 + 2 });
    await expectDerived(W, 'Order', 'a', { customerLimit: 10, doubled: 2 });
    // A change of the order changes its derived value, which the customer's aggregate reads.
    await put(W, 'Order', 'b', { id: 'b', amount: 20 });
    await expectDerived(W, 'Customer', 'c', { doubledSum: 42 + 2 });
    // The customer's change reaches its orders' aggregate (the link's to end).
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 77 });
    await expectDerived(W, 'Order', 'b', { customerLimit: 77 });
    const orphan = await put(W, 'Order', 'z', { id: 'z', amount: 1 });
    expect(orphan.statusCode).toBe(201);
    const z = await expectDerived(W, 'Order', 'z', { doubled: 2 });
    expect(z.derived.customerLimit).toMatchObject({ value: null, error: null });
  });

  it('stores evaluation errors on the value and goes on', async () => {
    const W = 'errors';
    await s.world(W, shop);
    await define(W, 'ratio', { objectType: 'Customer', expression: 'self.creditLimit / (self.creditLimit - 10)' });
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 10 });
    const c = await readUntil(W, 'Customer', 'c', 'an error', (o) => o.derived.ratio?.error !== null);
    expect(c.derived.ratio).toMatchObject({ value: null, error: { message: expect.stringMatching(/divide by zero/) } });
    await put(W, 'Customer', 'd', { id: 'd' });
    const d = await readUntil(W, 'Customer', 'd', 'an error', (o) => Boolean(o.derived.ratio?.error));
    expect(d.derived.ratio?.error?.message).toMatch(/creditLimit/);
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 20 });
    expect((await expectDerived(W, 'Customer', 'c', { ratio: 2 })).derived.ratio?.error).toBeNull();
  });

  it('refuses cycles and unknown references at definition, naming the path', async () => {
    const W = 'refusals';
    await s.world(W, shop);
    await define(W, 'a', { objectType: 'Customer', expression: 'self.creditLimit + 1' });
    await define(W, 'b', { objectType: 'Customer', expression: 'derived.a * 2' });
    const cycle = expectProblem(
      await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/a`, {
        body: { objectType: 'Customer', expression: 'derived.b + 1' },
      }),
      422,
    );
    expect(cycle.errors).toEqual([{ path: '/expression', message: 'cycle a → b → a' }]);
    // Across a link: an order reads the customer's b, the customer's c sums it, b reads c.
    await define(W, 'fromCustomer', {
      objectType: 'Order',
      expression: 'agg.b',
      aggregates: { b: { function: 'max', linkType: 'placed', derived: 'b' } },
    });
    await define(W, 'c', {
      objectType: 'Customer',
      expression: 'agg.x',
      aggregates: { x: { function: 'sum', linkType: 'placed', derived: 'fromCustomer' } },
    });
    const across = expectProblem(
      await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/b`, {
        body: { objectType: 'Customer', expression: 'derived.c * 2' },
      }),
      422,
    );
    expect(across.errors).toEqual([{ path: '/expression', message: 'cycle b → c → fromCustomer → b' }]);
    // Unknown references.
    const unknown = async (body: Record<string, unknown>) =>
      expectProblem(await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/x`, { body }), 422).errors;
    expect(await unknown({ objectType: 'Customer', expression: 'self.nope' })).toEqual([
      { path: '/expression', message: 'self.nope: Customer has no property nope' },
    ]);
    expect(await unknown({ objectType: 'Nope', expression: '1' })).toEqual([
      { path: '/objectType', message: "object type Nope is not in the world's schema" },
    ]);
    expect(await unknown({ objectType: 'Customer', expression: 'derived.ghost' })).toEqual([
      { path: '/expression', message: 'derived.ghost: derived property ghost is not defined' },
    ]);
    expect(
      await unknown({
        objectType: 'Customer',
        expression: 'agg.n',
        aggregates: { n: { function: 'count', linkType: 'ghost' } },
      }),
    ).toEqual([{ path: '/aggregates/n/linkType', message: "link type ghost is not in the world's schema" }]);
    expect(await unknown({ objectType: 'Customer', expression: 'agg.n' })).toEqual([
      { path: '/expression', message: 'agg.n is not declared in aggregates' },
    ]);
    // Nothing was stored by the refusals.
    const list = await s.intelCall('GET', `/v1/worlds/${W}/derived-properties`);
    expect(list.json().derivedProperties.map((d: { name: string }) => d.name)).toEqual(['a', 'b', 'c', 'fromCustomer']);
    expect((await s.intelCall('GET', `/v1/worlds/${W}/derived-properties/a`)).json().expression).toBe(
      'self.creditLimit + 1',
    );
    // What others read cannot be deleted or moved away from under them.
    const busy = expectProblem(await s.intelCall('DELETE', `/v1/worlds/${W}/derived-properties/a`), 409);
    expect(busy.detail).toMatch(/derived property b/);
    expectProblem(
      await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/a`, {
        body: { objectType: 'Order', expression: '1' },
      }),
      409,
    );
  });

  it('a rule raises, stays single while true, clears, raises again — in the API and on domain.alerts', async () => {
    const W = 'rules';
    await s.world(W, shop);
    await define(W, 'orderTotal', {
      objectType: 'Customer',
      expression: 'agg.sum',
      aggregates: { sum: { function: 'sum', linkType: 'placed', property: 'amount' } },
    });
    const rule = await s.intelCall('PUT', `/v1/worlds/${W}/rules/overLimit`, {
      body: {
        objectType: 'Customer',
        condition: 'derived.orderTotal > self.creditLimit',
        alertType: 'credit.exceeded',
        severity: 'warning',
      },
    });
    expect(rule.statusCode, rule.body).toBe(201);
    expect(rule.headers.etag).toBe('"1"');
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 100 });
    await put(W, 'Order', 'o1', { id: 'o1', amount: 60 });
    await link(W, 'c', 'o1');
    /** The alerts of customer c once intelligence holds this total and limit for it. */
    const alerts = async (total: number, limit: number, query = '') => {
      await readUntil(
        W,
        'Customer',
        'c',
        `total ${total}, limit ${limit}`,
        (o) => o.derived.orderTotal?.value === total && o.properties.creditLimit === limit,
      );
      const res = await s.intelCall('GET', `/v1/worlds/${W}/alerts?objectType=Customer&pk=c${query}`);
      expect(res.statusCode, res.body).toBe(200);
      return res.json().alerts as { id: string; status: string; clearReason: string | null }[];
    };
    expect(await alerts(60, 100)).toEqual([]);

    await put(W, 'Order', 'o2', { id: 'o2', amount: 50 });
    await link(W, 'c', 'o2'); // 110 > 100: raised
    let list = await alerts(110, 100);
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({
      status: 'OPEN',
      severity: 'warning',
      alertType: 'credit.exceeded',
      rule: 'overLimit',
    });
    const first = list[0]?.id as string;

    // Still true through several changes: still one alert.
    await put(W, 'Order', 'o2', { id: 'o2', amount: 70 });
    expect(await alerts(130, 100)).toMatchObject([{ id: first, status: 'OPEN' }]);
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 120 });
    expect(await alerts(130, 120)).toMatchObject([{ id: first, status: 'OPEN' }]);
    await put(W, 'Order', 'o1', { id: 'o1', amount: 65 });
    expect(await alerts(135, 120)).toMatchObject([{ id: first, status: 'OPEN' }]);

    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 1000 }); // cleared
    expect(await alerts(135, 1000)).toMatchObject([{ id: first, status: 'CLEARED', clearReason: 'condition false' }]);
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 999 }); // still false: nothing
    expect(await alerts(135, 999)).toHaveLength(1);

    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 10 }); // raised again
    list = await alerts(135, 10);
    expect(list).toHaveLength(2);
    expect(list[0]).toMatchObject({ status: 'OPEN' });
    expect(list[0]?.id).not.toBe(first);
    expect(await alerts(135, 10, '&status=OPEN')).toHaveLength(1);
    const one = await s.intelCall('GET', `/v1/worlds/${W}/alerts/${first}`);
    expect(one.json()).toMatchObject({ id: first, status: 'CLEARED' });
    // Pages of one, newest first.
    const page1 = await s.intelCall('GET', `/v1/worlds/${W}/alerts?rule=overLimit&limit=1`);
    expect(page1.json().alerts[0].id).toBe(list[0]?.id);
    const page2 = await s.intelCall('GET', `/v1/worlds/${W}/alerts?rule=overLimit&limit=1&cursor=${page1.json().next}`);
    expect(page2.json()).toMatchObject({ alerts: [{ id: first }], next: null });

    const records = await s.records('domain.alerts', (seen) => seen.filter((r) => r.event.world_id === W).length >= 3);
    const mine = records.filter((r) => r.event.world_id === W).map((r) => r.event);
    expect(mine.map((e) => [e.type, e.payload.alertId])).toEqual([
      ['alert.raised', first],
      ['alert.cleared', first],
      ['alert.raised', list[0]?.id],
    ]);
    expect(records.find((r) => r.event.world_id === W)?.record.key).toBe(`${W}/credit.exceeded`);
    expect(mine[0]?.payload).toMatchObject({ objectType: 'Customer', pk: 'c', severity: 'warning' });
  });

  it('duplicate change events recompute nothing and raise nothing twice', async () => {
    const W = 'dupes';
    await s.world(W, shop);
    await s.intelCall('PUT', `/v1/worlds/${W}/rules/big`, {
      body: { objectType: 'Order', condition: 'self.amount > 10', alertType: 'big', severity: 'info' },
    });
    await define(W, 'tenth', { objectType: 'Order', expression: 'double(self.amount) / 10.0' });
    await put(W, 'Order', 'o', { id: 'o', amount: 50 });
    const before = await expectDerived(W, 'Order', 'o', { tenth: 5 });
    await s.until('the alert raised', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/alerts?pk=o`);
      return res.json().alerts.length === 1 ? true : undefined;
    });
    const i = s.intelligence;
    if (!i) throw new Error('no intelligence');

    // The event that changed it, as data enqueued it, published again: same id, and a copy
    // with a new id (a replay of the same version).
    const { rows } = await s.data.app.pg.query<{ body: string; partition_key: string; topic: string }>(
      `SELECT body, partition_key, topic FROM outbox WHERE topic LIKE '%onto.changes.objects' AND partition_key = $1`,
      [`${W}/Order/o`],
    );
    const original = parseEvent(rows[0]?.body ?? null);
    const replay: EventEnvelope = newEvent({
      type: original.type,
      worldId: W,
      key: original.key,
      version: original.version,
      producer: 'data',
      producerSeq: original.producer_seq,
      payload: original.payload,
    });
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    try {
      await producer.send([
        {
          topic: rows[0]?.topic as string,
          messages: [original, replay].map((e) => ({
            key: rows[0]?.partition_key as string,
            value: JSON.stringify(e),
          })),
        },
      ]);
    } finally {
      await producer.disconnect();
    }
    // Both copies travel one partition, in order: once the second is in the inbox, the first
    // has been handled too.
    await s.until('the replay handled (it is recorded in the inbox)', async () => {
      const seen = await i.app.pg.query('SELECT 1 FROM inbox WHERE event_id = $1', [replay.event_id]);
      return seen.rowCount ? true : undefined;
    });
    const after = await expectDerived(W, 'Order', 'o', { tenth: 5 });
    expect(after.derived.tenth?.computedAt).toBe(before.derived.tenth?.computedAt);
    expect(after.version).toBe(1);
    const inbox = await i.app.pg.query('SELECT count(*)::int AS n FROM inbox WHERE event_id = $1', [original.event_id]);
    expect(inbox.rows[0]?.n).toBe(1);
    const alerts = await s.intelCall('GET', `/v1/worlds/${W}/alerts?pk=o`);
    expect(alerts.json().alerts).toHaveLength(1);
    const raised = await i.app.pg.query(
      `SELECT count(*)::int AS n FROM outbox WHERE topic LIKE '%domain.alerts' AND body LIKE $1`,
      [`%"world_id":"${W}"%`],
    );
    expect(raised.rows[0]?.n).toBe(1);
  });

  it('a schema change marks what it breaks invalid and recomputes what it changes', async () => {
    const W = 'schemachange';
    await s.world(W, shop);
    await put(W, 'Customer', 'c', { id: 'c', creditLimit: 3, rate: 1.5 });
    await define(W, 'scaled', { objectType: 'Customer', expression: 'self.rate * 2.0' });
    await define(W, 'limitPlus', { objectType: 'Customer', expression: 'self.creditLimit + 1' });
    await define(W, 'limitTwice', { objectType: 'Customer', expression: 'derived.limitPlus * 2' });
    await expectDerived(W, 'Customer', 'c', { limitTwice: 8, scaled: 3 });

    // creditLimit goes away: limitPlus, and limitTwice that reads it, become invalid.
    const changed = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/Customer`, {
      body: { ...Customer, properties: { id: Customer.properties.id, rate: Customer.properties.rate } },
    });
    expect(changed.statusCode, changed.body).toBe(200);
    const invalid = await s.until<{ errors: unknown }>('limitPlus invalid', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/derived-properties/limitPlus`);
      return res.json().state === 'invalid' ? res.json() : undefined;
    });
    expect(invalid.errors).toEqual([
      { path: '/expression', message: 'self.creditLimit: Customer has no property creditLimit' },
    ]);
    expect((await s.intelCall('GET', `/v1/worlds/${W}/derived-properties/limitTwice`)).json()).toMatchObject({
      state: 'invalid',
      errors: [{ path: '/expression', message: 'derived.limitPlus: derived property limitPlus is invalid' }],
    });
    expect((await s.intelCall('GET', `/v1/worlds/${W}/derived-properties/scaled`)).json().state).toBe('valid');
    await put(W, 'Customer', 'c', { id: 'c', rate: 4 });
    const c = await expectDerived(W, 'Customer', 'c', { scaled: 8 });
    // Not evaluated while invalid: the old value stays, marked stale.
    expect(c.derived.limitPlus).toMatchObject({ value: 4, stale: true });

    // creditLimit comes back: both valid again, recomputed.
    const back = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/Customer`, {
      body: { ...Customer, properties: { ...Customer.properties, creditLimit: { type: 'integer' } } },
    });
    expect(back.statusCode, back.body).toBe(200);
    await s.until('limitTwice valid again', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/derived-properties/limitTwice`);
      return res.json().state === 'valid' && res.json().recompute?.pending === false ? true : undefined;
    });
    await put(W, 'Customer', 'c', { id: 'c', rate: 4, creditLimit: 9 });
    const again = await expectDerived(W, 'Customer', 'c', { limitPlus: 10, limitTwice: 20 });
    expect(again.derived.limitTwice).toMatchObject({ stale: false, error: null });
  });

  it('forgets a dropped world: read model, definitions, values and alerts', async () => {
    const i = s.intelligence;
    if (!i) throw new Error('no intelligence');
    const count = async () => {
      const { rows } = await i.app.pg.query<{ n: number }>(
        `SELECT (SELECT count(*) FROM rm_objects WHERE world_id = 'errors')
              + (SELECT count(*) FROM derived_definitions WHERE world_id = 'errors')
              + (SELECT count(*) FROM derived_values WHERE world_id = 'errors') AS n`,
      );
      return Number(rows[0]?.n);
    };
    expect(await count()).toBeGreaterThan(0);
    const res = await s.controlCall('DELETE', '/v1/worlds/errors');
    expect(res.statusCode, res.body).toBe(202);
    await s.until('the world forgotten', async () => ((await count()) === 0 ? true : undefined));
    expectProblem(await s.intelCall('GET', '/v1/worlds/errors/derived-properties'), 404);
  });

  it('exports the staleness of each derived property', async () => {
    const i = s.intelligence;
    if (!i) throw new Error('no intelligence');
    const res = await i.app.inject({ method: 'GET', url: '/metrics' });
    expect(res.body).toMatch(/onto_derived_staleness_seconds\{world="follow",property="orderTotal"[^}]*\} [0-9.e-]+/);
    expect(res.body).toMatch(/onto_derived_max_staleness_seconds\{world="follow",property="orderTotal"[^}]*\} 5\n/);
  });
});

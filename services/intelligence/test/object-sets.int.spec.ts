import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * Object sets over intelligence's read model (issue 30 item 3, docs/adr/0075): data's query and
 * aggregate endpoints, where derived values (`derived.<name>`) filter, sort, group and measure,
 * at a ref, through a fork's chain, with signed page tokens and the same refusals.
 */

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, limit: { type: 'integer' }, tier: { type: 'string' } },
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
const SCAN_LIMIT = 8;

interface Obj {
  pk: string;
  properties: Record<string, unknown>;
  derived: Record<string, unknown>;
}

describe('object sets over the read model', () => {
  let s: IntelligenceStack;
  let token = '';
  /** What the test wrote: customer → limit, tier; order → customer, amount. */
  const customers = new Map<string, { limit: number; tier: string }>();
  const orders = new Map<string, { customer: string; amount: number }>();

  beforeAll(async () => {
    s = await intelligenceStack({
      intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000', QUERY_SCAN_LIMIT: String(SCAN_LIMIT), LOG_LEVEL: 'error' },
    });
    await s.world('shop', shop);
    await define('shop', 'doubled', { objectType: 'Customer', expression: 'self.limit * 2' });
    await define('shop', 'total', {
      objectType: 'Customer',
      expression: 'agg.sum',
      aggregates: { sum: { function: 'sum', linkType: 'placed', property: 'amount' } },
    });
    await define('shop', 'big', { objectType: 'Order', expression: 'self.amount > 100' });
    for (let i = 1; i <= 10; i++) {
      const pk = `c${String(i).padStart(2, '0')}`;
      const c = { limit: i * 10, tier: i % 3 === 0 ? 'gold' : i % 3 === 1 ? 'silver' : 'bronze' };
      customers.set(pk, c);
      await write('PUT', `/v1/worlds/shop/objects/Customer/${pk}`, { properties: { id: pk, ...c } });
      for (let j = 0; j < i % 4; j++) {
        const o = `o${pk}-${j}`;
        const amount = 40 * (j + 1) + i;
        orders.set(o, { customer: pk, amount });
        await write('PUT', `/v1/worlds/shop/objects/Order/${o}`, { properties: { id: o, amount } });
        await write('PUT', `/v1/worlds/shop/links/placed/${pk}/${o}`);
      }
    }
    await settled('shop');
  }, 180_000);
  afterAll(async () => s?.close());

  async function define(world: string, name: string, body: Record<string, unknown>) {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/derived-properties/${name}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
  }
  async function write(method: 'PUT' | 'DELETE', path: string, body?: Record<string, unknown>) {
    const res = await s.dataCall(method, path, body ? { body } : {});
    expect(res.statusCode, res.body).toBeLessThan(300);
    token = String(res.headers['x-consistency-token']);
  }
  const commitOf = () => Number(/data=(\d+)/.exec(token)?.[1]);
  const total = (pk: string) => [...orders.values()].filter((o) => o.customer === pk).reduce((n, o) => n + o.amount, 0);

  const query = (world: string, body: Record<string, unknown>, type = 'Customer', headers = {}) =>
    s.intelCall('POST', `/v1/worlds/${world}/objects/${type}/query`, { body, headers });
  const aggregate = (world: string, body: Record<string, unknown>, type = 'Customer') =>
    s.intelCall('POST', `/v1/worlds/${world}/objects/${type}/aggregate`, { body });
  /** Every page of a query, following nextPageToken; every page answers the first page's commit. */
  async function all(world: string, body: Record<string, unknown>, type = 'Customer'): Promise<Obj[]> {
    const out: Obj[] = [];
    let pageToken: string | undefined;
    let commit: number | undefined;
    for (;;) {
      const res = await query(world, { ...body, ...(pageToken ? { pageToken } : {}) }, type);
      expect(res.statusCode, res.body).toBe(200);
      const page = res.json();
      commit ??= page.commit;
      expect(page.commit).toBe(commit);
      out.push(...page.objects);
      if (!page.nextPageToken) return out;
      pageToken = page.nextPageToken;
    }
  }
  /** Until every customer's derived total is what the test wrote (the evaluation is asynchronous). */
  async function settled(world: string) {
    await s.until(
      `${world} derived totals`,
      async () => {
        const res = await query(world, { pageSize: 1000, allowScan: true }, 'Customer', {
          'x-consistency-token': token,
        });
        if (res.statusCode !== 200) return undefined;
        const got = res.json().objects as Obj[];
        return got.length === customers.size &&
          got.every(
            (o) => o.derived.total === total(o.pk) && o.derived.doubled === (customers.get(o.pk)?.limit ?? 0) * 2,
          )
          ? true
          : undefined;
      },
      60_000,
    );
  }

  it('filters, sorts and selects on derived values, pages with signed tokens, and refuses tampering', async () => {
    const expected = [...customers.keys()]
      .filter((pk) => total(pk) > 100 && customers.get(pk)?.tier !== 'bronze')
      .sort((a, b) => total(b) - total(a) || (a < b ? 1 : -1));
    expect(expected.length).toBeGreaterThan(2);
    const body = {
      where: { 'derived.total': { $gt: 100 }, $not: { tier: 'bronze' } },
      orderBy: [{ property: 'derived.total', direction: 'desc' }],
      select: ['tier', 'derived.total'],
      pageSize: 2,
      allowScan: true,
    };
    const got = await all('shop', body);
    expect(got.map((o) => o.pk)).toEqual(expected);
    expect(got[0]?.properties).toEqual({ tier: customers.get(expected[0] as string)?.tier });
    expect(got[0]?.derived).toEqual({ total: total(expected[0] as string) });

    // A token is bound to its query: altered, or sent with another body, 400 naming it.
    const first = (await query('shop', body)).json();
    const tampered = await query('shop', { ...body, pageToken: `${first.nextPageToken}x` });
    expect(tampered.statusCode).toBe(400);
    expect(tampered.json().errors[0].path).toBe('body/pageToken');
    const other = await query('shop', {
      ...body,
      where: { 'derived.total': { $gt: 1 } },
      pageToken: first.nextPageToken,
    });
    expect(other.statusCode).toBe(400);
    expect(other.json().errors[0].path).toBe('body/pageToken');

    // A derived boolean through a link: customers with a big order; and a pivot to those orders.
    const bigOwners = [...new Set([...orders.values()].filter((o) => o.amount > 100).map((o) => o.customer))].sort();
    const linked = await all('shop', {
      where: { $link: { type: 'placed', where: { 'derived.big': true } } },
      allowScan: true,
    });
    expect(linked.map((o) => o.pk)).toEqual(bigOwners);
    const pivoted = await all('shop', {
      where: { 'derived.doubled': { $gte: 100 } },
      pivotTo: ['placed'],
      allowScan: true,
    });
    const pivotExpected = [...orders.entries()]
      .filter(([, o]) => (customers.get(o.customer)?.limit ?? 0) * 2 >= 100)
      .map(([pk]) => pk)
      .sort();
    expect(pivoted.map((o) => o.pk)).toEqual(pivotExpected);
    expect(pivoted.every((o) => typeof o.derived.big === 'boolean')).toBe(true);
  }, 120_000);

  it('aggregates derived values, checked against the same GROUP BY computed from the rows written', async () => {
    const res = await aggregate('shop', {
      groupBy: [{ property: 'tier', type: 'exact' }],
      metrics: [
        { name: 'n', op: 'count' },
        { name: 'sum', op: 'sum', property: 'derived.total' },
        { name: 'max', op: 'max', property: 'derived.doubled' },
        { name: 'avgLimit', op: 'avg', property: 'limit' },
      ],
    });
    expect(res.statusCode, res.body).toBe(200);
    const expected = new Map<string, { n: number; sum: number; max: number; limits: number[] }>();
    for (const [pk, c] of customers) {
      const g = expected.get(c.tier) ?? { n: 0, sum: 0, max: 0, limits: [] };
      g.n++;
      g.sum += total(pk);
      g.max = Math.max(g.max, c.limit * 2);
      g.limits.push(c.limit);
      expected.set(c.tier, g);
    }
    const groups = res.json().groups as { key: { tier: string }; metrics: Record<string, number> }[];
    expect(groups.map((g) => g.key.tier)).toEqual([...expected.keys()].sort());
    for (const g of groups) {
      const e = expected.get(g.key.tier);
      expect(g.metrics).toMatchObject({ n: e?.n, sum: e?.sum, max: e?.max });
      expect(g.metrics.avgLimit).toBeCloseTo((e?.limits.reduce((a, b) => a + b, 0) ?? 0) / (e?.limits.length ?? 1), 9);
    }
    // Grouped by a derived boolean, with a filter on a property.
    const byBig = await aggregate(
      'shop',
      {
        where: { amount: { $gte: 50 } },
        groupBy: [{ property: 'derived.big', type: 'exact' }],
        metrics: [
          { name: 'n', op: 'count' },
          { name: 'amount', op: 'sum', property: 'amount' },
        ],
        allowScan: true,
      },
      'Order',
    );
    expect(byBig.statusCode, byBig.body).toBe(200);
    const kept = [...orders.values()].filter((o) => o.amount >= 50);
    const side = (big: boolean) => kept.filter((o) => o.amount > 100 === big);
    // Without a derived field (read without the derived values' lookup): the same count.
    const plain = await aggregate(
      'shop',
      { where: { amount: { $gte: 50 } }, metrics: [{ name: 'n', op: 'count' }], allowScan: true },
      'Order',
    );
    expect(plain.json().groups).toEqual([{ key: {}, metrics: { n: kept.length } }]);
    expect(byBig.json().groups).toEqual(
      [false, true]
        .filter((b) => side(b).length > 0)
        .map((b) => ({
          key: { 'derived.big': b },
          metrics: { n: side(b).length, amount: side(b).reduce((n, o) => n + o.amount, 0) },
        })),
    );
  }, 60_000);

  it('refuses unknown fields, wrong types and scans as data does, naming the JSON path', async () => {
    const refusal = async (body: Record<string, unknown>, status: number, path: string, route = query) => {
      const res = await route('shop', body);
      expect(res.statusCode, res.body).toBe(status);
      expect(res.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
    };
    await refusal({ where: { 'derived.nope': 1 } }, 400, 'body/where/derived.nope');
    await refusal({ where: { 'derived.total': { $gt: 'a lot' } } }, 400, 'body/where/derived.total/$gt');
    await refusal({ where: { 'derived.total': { $startsWith: 'x' } } }, 400, 'body/where/derived.total/$startsWith');
    await refusal({ orderBy: [{ property: 'derived.nope' }] }, 400, 'body/orderBy/0/property');
    await refusal({ where: { $link: { type: 'owns' } } }, 400, 'body/where/$link/type');
    await refusal({ where: { 'other.x': 1 } }, 400, 'body/where');
    await refusal({ pageSize: 0 }, 400, 'body/pageSize');
    await refusal({ metrics: [{ name: 's', op: 'sum', property: 'tier' }] }, 400, 'body/metrics/0/property', aggregate);
    // No index on the read model's properties: more than QUERY_SCAN_LIMIT customers, 422 naming the field.
    await refusal({ where: { 'derived.total': { $gt: 1 } } }, 422, 'body/where/derived.total/$gt');
    await refusal({ orderBy: [{ property: 'limit' }] }, 422, 'body/orderBy/0/property');
    // The primary key narrows it.
    const byKey = await query('shop', { where: { id: { $in: ['c01', 'c02'] }, 'derived.total': { $gte: 0 } } });
    expect(byKey.statusCode, byKey.body).toBe(200);
    expect(byKey.json().objects.map((o: Obj) => o.pk)).toEqual(['c01', 'c02']);
    const unknownWorld = await query('nowhere', {});
    expect(unknownWorld.statusCode).toBe(404);
  }, 60_000);

  it('reads at a commit (`at`), and a page token keeps reading the commit its first page pinned', async () => {
    const before = commitOf();
    const changed = 'c05';
    const extra = 'oc05-x';
    await write('PUT', `/v1/worlds/shop/objects/Order/${extra}`, { properties: { id: extra, amount: 1000 } });
    await write('PUT', `/v1/worlds/shop/links/placed/${changed}/${extra}`);
    const old = total(changed);
    orders.set(extra, { customer: changed, amount: 1000 });
    await settled('shop');
    const where = { id: changed };
    const now = (await query('shop', { where })).json();
    expect(now.objects[0].derived.total).toBe(old + 1000);
    const then = await query('shop', { where, at: String(before) });
    expect(then.statusCode, then.body).toBe(200);
    expect(then.json()).toMatchObject({ commit: before, objects: [{ pk: changed, derived: { total: old } }] });
    const agg = await aggregate('shop', {
      where: { id: changed },
      metrics: [{ name: 't', op: 'sum', property: 'derived.total' }],
      at: String(before),
    });
    expect(agg.json()).toEqual({ groups: [{ key: {}, metrics: { t: old } }], commit: before });

    // Pages: the first pins the commit; a write between pages is not seen by the later pages.
    const body = { pageSize: 4, orderBy: [{ property: 'id', direction: 'desc' }], select: ['limit'] };
    const first = (await query('shop', body)).json();
    await write('PUT', '/v1/worlds/shop/objects/Customer/c00', { properties: { id: 'c00', limit: 1, tier: 'gold' } });
    await write('DELETE', '/v1/worlds/shop/objects/Customer/c08');
    const rest = await all('shop', { ...body, pageToken: first.nextPageToken });
    // all() sends the token with the body, so every page answers the pinned commit.
    const seen = [...first.objects, ...rest].map((o: Obj) => o.pk);
    expect(seen).toEqual([...customers.keys()].sort().reverse());
    customers.set('c00', { limit: 1, tier: 'gold' });
    customers.delete('c08');

    // at: a tag that does not exist, an instant, malformed.
    expect((await query('shop', { at: 'nosuchtag' })).statusCode).toBe(404);
    expect((await query('shop', { at: '2026-01-01T00:00:00Z' })).statusCode).toBe(422);
  }, 120_000);

  it('reads a fork through its chain (depth 3): inherited objects with the base’s derived values, its own shadowing', async () => {
    await settled('shop');
    const fork = async (id: string, from: string) => {
      const res = await s.controlCall('POST', '/v1/worlds', { body: { id, from: { world: from } } });
      expect(res.statusCode, res.body).toBe(202);
      await s.until(`${id} READY`, async () =>
        (await s.controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
      );
    };
    await fork('f1', 'shop');
    await write('PUT', '/v1/worlds/f1/objects/Order/of1', { properties: { id: 'of1', amount: 500 } });
    await write('PUT', '/v1/worlds/f1/links/placed/c02/of1');
    await fork('f2', 'f1');
    await write('DELETE', '/v1/worlds/f2/objects/Customer/c04');
    await fork('f3', 'f2');
    await write('PUT', '/v1/worlds/f3/objects/Customer/c09', { properties: { id: 'c09', limit: 7, tier: 'gold' } });
    // The base moves on after the forks: none of them sees it.
    await write('PUT', '/v1/worlds/shop/objects/Customer/c06', { properties: { id: 'c06', limit: 999, tier: 'gold' } });

    const expectedTotal = (pk: string) => total(pk) + (pk === 'c02' ? 500 : 0);
    const limits = (pk: string) => (pk === 'c09' ? 7 : (customers.get(pk)?.limit ?? 0));
    const expected = [...customers.keys()].filter((pk) => pk !== 'c04').sort();
    await s.until(
      'f3 derived values through its chain',
      async () => {
        const got = await all('f3', { pageSize: 3, allowScan: true });
        const ok =
          got.map((o) => o.pk).join() === expected.join() &&
          got.every((o) => o.derived.total === expectedTotal(o.pk) && o.derived.doubled === limits(o.pk) * 2);
        return ok ? got : undefined;
      },
      60_000,
    );
    const gold = await aggregate('f3', {
      where: { tier: 'gold' },
      metrics: [
        { name: 'n', op: 'count' },
        { name: 'doubled', op: 'sum', property: 'derived.doubled' },
      ],
      allowScan: true,
    });
    const goldPks = expected.filter((pk) => (pk === 'c09' ? 'gold' : customers.get(pk)?.tier) === 'gold');
    expect(gold.json().groups).toEqual([
      { key: {}, metrics: { n: goldPks.length, doubled: goldPks.reduce((n, pk) => n + limits(pk) * 2, 0) } },
    ]);
    // The fork's own order through a link predicate in the middle of the chain.
    const big = await all('f3', { where: { $link: { type: 'placed', where: { amount: 500 } } }, allowScan: true });
    expect(big.map((o) => o.pk)).toEqual(['c02']);
    expect(
      (await all('shop', { where: { $link: { type: 'placed', where: { amount: 500 } } }, allowScan: true })).length,
    ).toBe(0);
  }, 180_000);
});

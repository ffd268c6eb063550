import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forkWorld, type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * A fork's inherited objects in intelligence (issue 16, docs/adr/0033 decision 2): the fork reads
 * its base's read model, derived values and open alerts as of the fork point, recursively, until
 * it writes an object itself; then its own rows shadow the base's.
 */

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, creditLimit: { type: 'integer' } },
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

interface Alert {
  id: string;
  pk: string;
  status: string;
  inherited: boolean;
  world?: string;
}

describe('inherited objects in a fork', () => {
  let s: IntelligenceStack;
  // The last write's consistency token and the world it was in: reads of that world carry it.
  let token = '';
  let tokenWorld = '';

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world('base', shop);
    await define('base', 'derived-properties/doubled', { objectType: 'Customer', expression: 'self.creditLimit * 2' });
    await define('base', 'derived-properties/orders', {
      objectType: 'Customer',
      expression: 'agg.n',
      aggregates: { n: { function: 'count', linkType: 'placed' } },
    });
    await define('base', 'derived-properties/total', {
      objectType: 'Customer',
      expression: 'agg.sum',
      aggregates: { sum: { function: 'sum', linkType: 'placed', property: 'amount' } },
    });
    await define('base', 'rules/risky', {
      objectType: 'Customer',
      condition: 'self.creditLimit > 1000',
      alertType: 'credit.high',
      severity: 'warning',
    });
  }, 120_000);
  afterAll(async () => s?.close());

  async function define(world: string, path: string, body: Record<string, unknown>) {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/${path}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return res.json() as { version: number };
  }
  const fork = (id: string, from: string, ref?: string) => forkWorld(s, id, from, ref);
  const write = async (method: 'PUT' | 'DELETE', path: string, body?: Record<string, unknown>) => {
    const res = await s.dataCall(method, path, body ? { body } : {});
    expect(res.statusCode, res.body).toBeLessThan(300);
    token = String(res.headers['x-consistency-token']);
    tokenWorld = path.split('/')[3] ?? '';
  };
  const customer = (world: string, pk: string, creditLimit: number) =>
    write('PUT', `/v1/worlds/${world}/objects/Customer/${pk}`, { properties: { id: pk, creditLimit } });
  const order = (world: string, pk: string, amount: number) =>
    write('PUT', `/v1/worlds/${world}/objects/Order/${pk}`, { properties: { id: pk, amount } });
  const link = (world: string, from: string, to: string, method: 'PUT' | 'DELETE' = 'PUT') =>
    write(method, `/v1/worlds/${world}/links/placed/${from}/${to}`);

  /** The derived values intelligence answers now (after the last write's token), or the status. */
  const derived = async (world: string, pk: string, withToken = world === tokenWorld) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/objects/Customer/${pk}/derived`, {
      headers: withToken ? { 'x-consistency-token': token } : {},
    });
    if (res.statusCode !== 200) return res.statusCode;
    const out: Record<string, unknown> = {};
    for (const [name, v] of Object.entries(res.json().derived as Record<string, { value: unknown; stale: boolean }>)) {
      out[name] = v.stale ? `stale:${JSON.stringify(v.value)}` : v.value;
    }
    return out;
  };
  const until = (world: string, pk: string, expected: Record<string, unknown>) =>
    s.until(`${world} ${pk} ${JSON.stringify(expected)}`, async () => {
      const got = await derived(world, pk);
      return typeof got === 'object' && Object.entries(expected).every(([k, v]) => got[k] === v) ? got : undefined;
    });
  const alerts = async (world: string, query = '') => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/alerts?${query}`, {
      headers: world === tokenWorld ? { 'x-consistency-token': token } : {},
    });
    expect(res.statusCode, res.body).toBe(200);
    return res.json().alerts as Alert[];
  };

  it('serves the base’s derived values at the fork point from READY; later writes stay on their side', async () => {
    await customer('base', 'c1', 100);
    await customer('base', 'c2', 7);
    await until('base', 'c1', { doubled: 200 });
    await until('base', 'c2', { doubled: 14 });

    await fork('child', 'base');
    // At READY, without a token: the base's values as of the fork point, not a 404.
    expect(await derived('child', 'c1', false)).toMatchObject({ doubled: 200, orders: 0, total: 0 });
    const object = await s.intelCall('GET', '/v1/worlds/child/objects/Customer/c2');
    expect(object.statusCode, object.body).toBe(200);
    expect(object.json()).toMatchObject({ version: 1, properties: { id: 'c2', creditLimit: 7 } });

    // The base moves on: the child still reads the fork point.
    await customer('base', 'c1', 300);
    await until('base', 'c1', { doubled: 600 });
    expect(await derived('child', 'c1')).toMatchObject({ doubled: 200 });

    // The child writes: its own value, which the base never sees.
    await customer('child', 'c1', 50);
    await until('child', 'c1', { doubled: 100 });
    expect(await derived('base', 'c1')).toMatchObject({ doubled: 600 });
    // A deletion in the child hides the inherited object there only.
    await write('DELETE', '/v1/worlds/child/objects/Customer/c2');
    await s.until('child c2 gone', async () => ((await derived('child', 'c2')) === 404 ? true : undefined));
    expect(await derived('base', 'c2')).toMatchObject({ doubled: 14 });
  }, 120_000);

  it('a fork at an older commit reads the versions and values the base had then', async () => {
    await customer('base', 'p1', 5);
    const then = /data=(\d+)/.exec(token)?.[1] ?? '';
    // Applied before the next write: values are kept per applied batch (docs/adr/0033).
    await until('base', 'p1', { doubled: 10 });
    await customer('base', 'p1', 6);
    await customer('base', 'p2', 1); // created after that commit: not in the fork
    await until('base', 'p2', { doubled: 2 });
    expect(await derived('base', 'p1')).toMatchObject({ doubled: 12 });
    await fork('past', 'base', then);
    expect(await derived('past', 'p1')).toMatchObject({ doubled: 10 });
    const object = await s.intelCall('GET', '/v1/worlds/past/objects/Customer/p1');
    expect(object.json()).toMatchObject({ version: 1, properties: { creditLimit: 5 } });
    expect(await derived('past', 'p2')).toBe(404);
  }, 120_000);

  it('reads an object and its derived values at a data commit (?at=), in a world and in a fork', async () => {
    const commit = () => Number(/data=(\d+)/.exec(token)?.[1]);
    const at = (world: string, n: number | string, path = '') =>
      s.intelCall('GET', `/v1/worlds/${world}/objects/Customer/h1${path}?at=${n}`);
    await customer('base', 'h1', 10);
    const v1 = commit();
    await until('base', 'h1', { doubled: 20 });
    await customer('base', 'h1', 30);
    const v2 = commit();
    await until('base', 'h1', { doubled: 60 });

    expect((await at('base', v1)).json()).toMatchObject({
      version: 1,
      properties: { creditLimit: 10 },
      derived: { doubled: { value: 20 } },
    });
    expect((await at('base', v1, '/derived')).json()).toMatchObject({
      version: 1,
      derived: { doubled: { value: 20 } },
    });
    expect((await at('base', v2)).json()).toMatchObject({ version: 2, derived: { doubled: { value: 60 } } });
    expect((await s.intelCall('GET', '/v1/worlds/base/objects/Customer/h1')).json()).toMatchObject({ version: 2 });
    // Before it was written: not there.
    expect((await at('base', v1 - 1)).statusCode).toBe(404);

    // A fork: before its fork point it has no commits; at its own write, its own version.
    await fork('history', 'base');
    await customer('history', 'h1', 5);
    const v3 = commit();
    await until('history', 'h1', { doubled: 10 });
    expect((await at('history', v3)).json()).toMatchObject({ version: 3, derived: { doubled: { value: 10 } } });
    const before = await at('history', v1);
    expect(before.statusCode, before.body).toBe(422);
    expect(before.json().errors[0].path).toBe('querystring/at');
    // A name is a tag of the world or nothing (docs/adr/0046); a ref of no shape is malformed.
    const noTag = await at('history', 'yesterday');
    expect(noTag.statusCode).toBe(404);
    expect(noTag.json().errors[0].path).toBe('querystring/at');
    const malformed = await at('history', 'not%20a%20ref');
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().errors[0].path).toBe('querystring/at');
  }, 120_000);

  it('a fork of a fork reads each base at its own fork point', async () => {
    await customer('base', 'g1', 1);
    await customer('base', 'g2', 2);
    await until('base', 'g2', { doubled: 4 });
    await fork('mid', 'base');
    await customer('mid', 'g1', 10);
    await until('mid', 'g1', { doubled: 20 });
    await customer('base', 'g2', 3); // after mid's fork point: not mid's, not leaf's
    await until('base', 'g2', { doubled: 6 });
    await fork('leaf', 'mid');
    await customer('mid', 'g1', 11); // after leaf's fork point
    await until('mid', 'g1', { doubled: 22 });

    expect(await derived('leaf', 'g1')).toMatchObject({ doubled: 20 });
    expect(await derived('leaf', 'g2')).toMatchObject({ doubled: 4 });
    expect(await derived('mid', 'g2')).toMatchObject({ doubled: 4 });
    // A token of a base write the leaf inherits is covered through the chain (the leaf applied nothing).
    await customer('mid', 'g3', 5);
    await until('mid', 'g3', { doubled: 10 });
    await fork('leaf2', 'mid');
    expect(await derived('leaf2', 'g3', true)).toMatchObject({ doubled: 10 });
    expect(await derived('leaf2', 'g1', true)).toMatchObject({ doubled: 22 });
    await customer('leaf', 'g2', 100);
    await until('leaf', 'g2', { doubled: 200 });
    expect(await derived('mid', 'g2')).toMatchObject({ doubled: 4 });
  }, 120_000);

  it('lists the base’s alerts open at the fork point as inherited; a child write re-evaluates and shadows them', async () => {
    await customer('base', 'a1', 5000);
    await customer('base', 'a2', 6000);
    await customer('base', 'a3', 7000);
    await s.until('base alerts', async () => ((await alerts('base', 'status=OPEN')).length >= 3 ? true : undefined));
    await fork('alerting', 'base');

    const listed = await alerts('alerting');
    const byPk = new Map(listed.map((a) => [a.pk, a]));
    for (const pk of ['a1', 'a2', 'a3']) {
      expect(byPk.get(pk), pk).toMatchObject({ status: 'OPEN', inherited: true, world: 'base' });
    }
    // Cleared in the base after the fork: still open as of the fork point in the child.
    await customer('base', 'a1', 1);
    await s.until('a1 cleared in base', async () =>
      (await alerts('base', 'pk=a1&status=OPEN')).length === 0 ? true : undefined,
    );
    const [a1] = await alerts('alerting', 'pk=a1');
    expect(a1).toMatchObject({ status: 'OPEN', inherited: true, world: 'base' });
    // Read by its id in the child as the child lists it, and in the base as the base holds it now.
    const one = await s.intelCall('GET', `/v1/worlds/alerting/alerts/${(a1 as { id: string }).id}`);
    expect(one.statusCode, one.body).toBe(200);
    expect(one.json()).toEqual(a1);
    const inBase = await s.intelCall('GET', `/v1/worlds/base/alerts/${(a1 as { id: string }).id}`);
    expect(inBase.json()).toMatchObject({ status: 'CLEARED', inherited: false });

    // Nothing in the child acted on them: the child has no alert of its own.
    expect((await alerts('alerting')).filter((a) => !a.inherited)).toEqual([]);

    // The child writes a2 with the condition still true: its own alert, which shadows the inherited one.
    await customer('alerting', 'a2', 6500);
    await until('alerting', 'a2', { doubled: 13000 });
    await s.until('child a2 own alert', async () => {
      const mine = await alerts('alerting', 'pk=a2');
      return mine.length === 1 && mine[0]?.inherited === false ? mine : undefined;
    });
    // …and a3 with the condition false: no alert at all there.
    await customer('alerting', 'a3', 5);
    await until('alerting', 'a3', { doubled: 10 });
    expect(await alerts('alerting', 'pk=a3')).toEqual([]);
    expect(await alerts('base', 'pk=a3&status=OPEN')).toHaveLength(1);
  }, 120_000);

  it('an aggregate over links counts inherited links and objects plus the child’s changes', async () => {
    await customer('base', 'l1', 1);
    await order('base', 'o1', 10);
    await order('base', 'o2', 20);
    await link('base', 'l1', 'o1');
    await link('base', 'l1', 'o2');
    await until('base', 'l1', { orders: 2, total: 30 });
    await fork('links', 'base');
    expect(await derived('links', 'l1')).toMatchObject({ orders: 2, total: 30 });

    // A new order linked in the child: counted with the inherited two.
    await order('links', 'o3', 5);
    await link('links', 'l1', 'o3');
    await until('links', 'l1', { orders: 3, total: 35 });
    // An inherited order changed in the child: the inherited customer's total follows.
    await order('links', 'o1', 100);
    await until('links', 'l1', { orders: 3, total: 125 });
    // An inherited link removed in the child.
    await link('links', 'l1', 'o2', 'DELETE');
    await until('links', 'l1', { orders: 2, total: 105 });
    // The base is untouched.
    expect(await derived('base', 'l1')).toMatchObject({ orders: 2, total: 30 });
  }, 120_000);

  it('a definition changed in the child recomputes the inherited objects of its type', async () => {
    await customer('base', 'd1', 4);
    await until('base', 'd1', { doubled: 8 });
    await fork('redefined', 'base');
    await define('redefined', 'derived-properties/doubled', {
      objectType: 'Customer',
      expression: 'self.creditLimit * 3',
    });
    await until('redefined', 'd1', { doubled: 12 });
    expect(await derived('base', 'd1')).toMatchObject({ doubled: 8 });
  }, 120_000);
});

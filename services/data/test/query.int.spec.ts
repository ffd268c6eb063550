import { compileWhere, parseWhere } from '@onto/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { indexName } from '../src/schema/replica.js';
import { dataStack, expectProblem, forkThroughControl, type Stack } from './stack.js';

/*
 * Object-set queries and aggregations (docs/adr/0047, 0048) against the real stack: every
 * operator checked against a reference evaluation of the rows the test wrote, at a ref, in a
 * depth-3 fork, pagination while writers run, aggregations against a GROUP BY computed here.
 */

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string', indexed: true },
    bio: { type: 'string', indexed: true },
    note: { type: 'string' },
    tier: { type: { type: 'enum', values: ['gold', 'silver', 'bronze'] }, indexed: true },
    tags: { type: { type: 'array', items: 'string' }, indexed: true },
    score: { type: 'double' },
    active: { type: 'boolean' },
    joined: { type: 'date', indexed: true },
    seen: { type: 'timestamp' },
    address: { type: { type: 'struct', fields: { city: 'string' } } },
  },
};
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', indexed: true },
    status: { type: 'string', indexed: true },
    placed: { type: 'timestamp' },
  },
};
const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    n: { type: 'integer', indexed: true },
    group: { type: 'string', indexed: true },
    free: { type: 'string' },
  },
};
const schema = {
  objectTypes: { Customer, Order, Item },
  linkTypes: {
    placed: { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' },
    refers: { from: 'Customer', to: 'Customer', cardinality: 'MANY_TO_MANY' },
  },
};

type Props = Record<string, unknown>;
type Where = Record<string, unknown>;
/** The state a test wrote: objects by type and pk, links as [linkType, from, to]. */
interface State {
  objects: Record<string, Map<string, Props>>;
  links: Set<string>;
}
const LINK_ENDS: Record<string, [string, string]> = { placed: ['Customer', 'Order'], refers: ['Customer', 'Customer'] };

const termsOf = (s: string) => new Set(s.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []);

/** The reference semantics of a where-clause (docs/adr/0047), written independently of the SQL. */
function matches(state: State, type: string, pk: string, o: Props, w: Where): boolean {
  return Object.entries(w).every(([key, value]) => {
    if (key === '$and') return (value as Where[]).every((x) => matches(state, type, pk, o, x));
    if (key === '$or') return (value as Where[]).some((x) => matches(state, type, pk, o, x));
    if (key === '$not') return !matches(state, type, pk, o, value as Where);
    if (key === '$link') {
      const { type: lt, where = {} } = value as { type: string; where?: Where };
      const [from, to] = LINK_ENDS[lt] as [string, string];
      const outgoing = from === type;
      const target = outgoing ? to : from;
      for (const link of state.links) {
        const [t, f, k] = JSON.parse(link) as [string, string, string];
        if (t !== lt || (outgoing ? f : k) !== pk) continue;
        const other = outgoing ? k : f;
        const end = state.objects[target]?.get(other);
        if (end && matches(state, target, other, end, where)) return true;
      }
      return false;
    }
    const ops = typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : { $eq: value };
    const v = o[key];
    return Object.entries(ops).every(([op, x]) => {
      switch (op) {
        case '$eq':
          return v === x;
        case '$ne':
          return v !== x;
        case '$in':
          return (x as unknown[]).includes(v);
        case '$gt':
          return v !== undefined && typeof v === typeof x && (v as number) > (x as number);
        case '$gte':
          return v !== undefined && typeof v === typeof x && (v as number) >= (x as number);
        case '$lt':
          return v !== undefined && typeof v === typeof x && (v as number) < (x as number);
        case '$lte':
          return v !== undefined && typeof v === typeof x && (v as number) <= (x as number);
        case '$isNull':
          return (v === undefined) === x;
        case '$startsWith':
          return typeof v === 'string' && v.startsWith(x as string);
        case '$contains':
          return Array.isArray(v) && v.includes(x);
        case '$containsAnyTerm': {
          const have = termsOf(typeof v === 'string' ? v : '');
          return [...termsOf(x as string)].some((t) => have.has(t));
        }
        case '$containsAllTerms': {
          const have = termsOf(typeof v === 'string' ? v : '');
          return typeof v === 'string' && [...termsOf(x as string)].every((t) => have.has(t));
        }
        default:
          throw new Error(`no reference for ${op}`);
      }
    });
  });
}

const expected = (state: State, type: string, where: Where) =>
  [...(state.objects[type] ?? new Map()).entries()]
    .filter(([pk, o]) => matches(state, type, pk, o, where))
    .map(([pk]) => pk)
    .sort();

/** A deterministic generator (mulberry32). */
function random(seed: number) {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ['red', 'green', 'blue', 'fast', 'slow', 'Ocean', 'river', 'stone'];
function customer(rnd: () => number, i: number): Props {
  const pick = <T>(xs: T[]) => xs[Math.floor(rnd() * xs.length)] as T;
  const c: Props = { id: `c${String(i).padStart(3, '0')}` };
  if (rnd() < 0.9) c.name = `${pick(['ann', 'bob', 'cid', 'dee'])}${pick(['', 'ie', 'a'])}-${i % 7}`;
  if (rnd() < 0.8) c.bio = `${pick(WORDS)} ${pick(WORDS)}-${pick(WORDS)}`;
  if (rnd() < 0.5) c.note = pick(WORDS);
  if (rnd() < 0.85) c.tier = pick(['gold', 'silver', 'bronze']);
  if (rnd() < 0.7) c.tags = [...new Set(Array.from({ length: 1 + Math.floor(rnd() * 3) }, () => pick(WORDS)))];
  if (rnd() < 0.8) c.score = Math.round(rnd() * 1000) / 10;
  if (rnd() < 0.8) c.active = rnd() < 0.5;
  if (rnd() < 0.8) c.joined = `2025-${String(1 + Math.floor(rnd() * 12)).padStart(2, '0')}-1${Math.floor(rnd() * 9)}`;
  if (rnd() < 0.8) c.seen = new Date(Date.UTC(2026, 0, 1) + Math.floor(rnd() * 1e10)).toISOString();
  if (rnd() < 0.3) c.address = { city: pick(['oslo', 'rome']) };
  return c;
}

/** Every where-clause the tests try: each operator, on each kind it applies to, and combinations. */
const WHERES: Where[] = [
  {},
  { id: 'c005' },
  { id: { $in: ['c001', 'c010', 'nope'] } },
  { id: { $gte: 'c020', $lt: 'c030' } },
  { id: { $startsWith: 'c01' } },
  { id: { $ne: 'c002' } },
  { name: { $eq: 'ann-3' } },
  { name: { $ne: 'ann-3' } },
  { name: { $startsWith: 'bo' } },
  { name: { $gt: 'bob', $lte: 'dee' } },
  { name: { $isNull: true } },
  { name: { $isNull: false } },
  { tier: { $in: ['gold', 'bronze'] } },
  { tier: 'silver' },
  { tags: { $contains: 'red' } },
  { tags: { $isNull: true } },
  { bio: { $containsAnyTerm: 'ocean stone' } },
  { bio: { $containsAllTerms: 'red blue' } },
  { score: { $gt: 50 } },
  { score: { $gte: 10, $lt: 20.5 } },
  { score: { $lte: 30 } },
  { active: true },
  { active: { $ne: true } },
  { joined: { $gte: '2025-06-01' } },
  { joined: { $lt: '2025-03-15' } },
  { seen: { $gt: '2026-02-15T00:00:00.000Z' } },
  { address: { $isNull: false } },
  { $or: [{ tier: 'gold' }, { score: { $gt: 90 } }] },
  { $and: [{ tier: 'gold' }, { active: true }] },
  { $not: { tier: 'gold' } },
  { $not: { score: { $gt: 50 } } },
  { tier: 'gold', active: false },
  { $or: [{ $and: [{ tags: { $contains: 'blue' } }, { $not: { name: { $isNull: true } } }] }, { id: 'c000' }] },
  { $link: { type: 'placed' } },
  { $link: { type: 'placed', where: { amount: { $gt: 100 } } } },
  { $not: { $link: { type: 'placed', where: { status: 'open' } } } },
  { $link: { type: 'refers', where: { tier: 'gold' } } },
  { $link: { type: 'refers', where: { $link: { type: 'placed', where: { amount: { $lte: 50 } } } } } },
  { $or: [{ $link: { type: 'placed', where: { status: 'void' } } }, { tier: 'bronze', score: { $lt: 40 } }] },
];

describe('object-set queries and aggregations', () => {
  let s: Stack;
  const W = 'qw';
  const SCAN_LIMIT = 400;
  const state: State = { objects: { Customer: new Map(), Order: new Map(), Item: new Map() }, links: new Set() };

  const query = (world: string, type: string, body: unknown) =>
    s.dataCall('POST', `/v1/worlds/${world}/objects/${type}/query`, { body });
  const aggregate = (world: string, type: string, body: unknown) =>
    s.dataCall('POST', `/v1/worlds/${world}/objects/${type}/aggregate`, { body });
  /** Every page of a query, following nextPageToken. */
  async function all(world: string, type: string, body: Record<string, unknown>) {
    const objects: { pk: string; version: number; properties: Props; type: string }[] = [];
    let token: string | null = null;
    let commit: number | undefined;
    do {
      const res = await query(world, type, { ...body, ...(token && { pageToken: token }) });
      expect(res.statusCode, res.body).toBe(200);
      const page = res.json();
      if (commit !== undefined) expect(page.commit).toBe(commit);
      commit = page.commit;
      objects.push(...page.objects);
      token = page.nextPageToken;
    } while (token);
    return { objects, commit: commit as number };
  }
  const put = async (world: string, type: string, properties: Props) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/${type}/${properties.id}`, {
      body: { properties },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return Number(String(res.headers['x-consistency-token']).replace('data=', ''));
  };
  const link = async (world: string, lt: string, from: string, to: string) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/links/${lt}/${from}/${to}`, { body: {} });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  const bulk = async (world: string, type: string, rows: Props[]) => {
    const res = await s.dataCall('POST', `/v1/worlds/${world}/bulk/${type}`, {
      body: rows.map((properties) => ({ properties })),
    });
    expect(res.statusCode, res.body).toBe(200);
  };
  const schemaVersionOf = async (world: string) =>
    (await s.dataCall('GET', `/v1/worlds/${world}/schema-version`)).json().version as number;
  const dataHead = async () =>
    Number((await s.data.app.pg.query<{ c: string }>('SELECT last_value AS c FROM data_seq')).rows[0]?.c ?? 0);

  beforeAll(async () => {
    s = await dataStack({ dataEnv: { QUERY_SCAN_LIMIT: String(SCAN_LIMIT), LOG_LEVEL: 'error' } });
    await s.world(W, schema);
    const rnd = random(7);
    const customers = Array.from({ length: 120 }, (_, i) => customer(rnd, i));
    await bulk(W, 'Customer', customers);
    for (const c of customers) state.objects.Customer?.set(c.id as string, c);
    const orders: Props[] = Array.from({ length: 150 }, (_, i) => ({
      id: `o${String(i).padStart(3, '0')}`,
      amount: Math.floor(rnd() * 200),
      status: ['open', 'paid', 'void'][Math.floor(rnd() * 3)],
      placed: new Date(Date.UTC(2026, 0, 1) + Math.floor(rnd() * 1e10)).toISOString(),
    }));
    await bulk(W, 'Order', orders);
    for (const o of orders) state.objects.Order?.set(o.id as string, o);
    for (const o of orders.slice(0, 110)) {
      const c = customers[Math.floor(rnd() * 60)]?.id as string;
      await link(W, 'placed', c, o.id as string);
      state.links.add(JSON.stringify(['placed', c, o.id]));
    }
    for (let i = 0; i < 40; i++) {
      const a = customers[Math.floor(rnd() * 120)]?.id as string;
      const b = customers[Math.floor(rnd() * 120)]?.id as string;
      if (state.links.has(JSON.stringify(['refers', a, b]))) continue;
      await link(W, 'refers', a, b);
      state.links.add(JSON.stringify(['refers', a, b]));
    }
  }, 180_000);
  afterAll(async () => {
    await s?.close();
  });

  it('answers every operator and combination as the reference evaluation of the rows written', async () => {
    for (const where of WHERES) {
      const { objects } = await all(W, 'Customer', { where, pageSize: 37, allowScan: true });
      expect(objects.map((o) => o.pk).sort(), JSON.stringify(where)).toEqual(expected(state, 'Customer', where));
      for (const o of objects) expect(o.properties).toEqual(state.objects.Customer?.get(o.pk));
    }
  }, 120_000);

  it('orders by several properties, each its direction, and restricts properties to select', async () => {
    const orderBy = [
      { property: 'tier', direction: 'desc' },
      { property: 'score', direction: 'asc' },
      { property: 'name', direction: 'desc' },
    ] as const;
    const { objects } = await all(W, 'Customer', { orderBy, select: ['tier', 'score'], pageSize: 7 });
    const cmp = (a: unknown, b: unknown, desc: boolean) => {
      // Objects without a value come last ascending, first descending.
      if (a === b) return 0;
      if (a === undefined) return desc ? -1 : 1;
      if (b === undefined) return desc ? 1 : -1;
      return ((a as number) < (b as number) ? -1 : 1) * (desc ? -1 : 1);
    };
    const want = [...(state.objects.Customer?.entries() ?? [])]
      .sort(
        ([pa, a], [pb, b]) =>
          orderBy.reduce((r, k) => r || cmp(a[k.property], b[k.property], k.direction === 'desc'), 0) ||
          cmp(pa, pb, true),
      )
      .map(([pk]) => pk);
    expect(objects.map((o) => o.pk)).toEqual(want);
    const first = objects[0];
    const stored = state.objects.Customer?.get(first?.pk as string) as Props;
    expect(first?.properties).toEqual(
      Object.fromEntries(['tier', 'score'].filter((k) => k in stored).map((k) => [k, stored[k]])),
    );
    expect(Object.keys(first ?? {}).sort()).toEqual(['pk', 'properties', 'type', 'version']);
  });

  it('pivots through link types to the objects reached, deduplicated', async () => {
    const where = { tier: 'gold' };
    const { objects } = await all(W, 'Customer', { where, pivotTo: ['placed'], pageSize: 9 });
    const gold = new Set(expected(state, 'Customer', where));
    const reached = new Set(
      [...state.links]
        .map((l) => JSON.parse(l))
        .filter(([t, f]) => t === 'placed' && gold.has(f))
        .map(([, , to]) => to),
    );
    expect(objects.map((o) => o.pk).sort()).toEqual([...reached].sort());
    expect(new Set(objects.map((o) => o.type))).toEqual(new Set(['Order']));
    // Two steps: customers referred by gold customers, then their orders.
    const two = await all(W, 'Customer', { where, pivotTo: ['refers', 'placed'], pageSize: 50 });
    const referred = new Set(
      [...state.links]
        .map((l) => JSON.parse(l))
        .filter(([t, f]) => t === 'refers' && gold.has(f))
        .map(([, , b]) => b),
    );
    const orders = [...state.links]
      .map((l) => JSON.parse(l))
      .filter(([t, f]) => t === 'placed' && referred.has(f))
      .map(([, , o]) => o);
    expect(two.objects.map((o) => o.pk).sort()).toEqual([...new Set(orders)].sort());
  });

  it('reads at a ref: the set as it was at a commit, after updates and deletes', async () => {
    const before = structuredClone([...(state.objects.Customer?.entries() ?? [])]);
    const commit = await dataHead();
    const changed = ['c003', 'c004', 'c050', 'c051'];
    for (const pk of changed) {
      const res = await s.dataCall('PATCH', `/v1/worlds/${W}/objects/Customer/${pk}`, {
        body: { properties: { tier: 'gold', score: 99.5 } },
      });
      expect(res.statusCode, res.body).toBe(200);
    }
    const del = await s.dataCall('DELETE', `/v1/worlds/${W}/objects/Customer/c007`);
    expect(del.statusCode).toBe(204);
    await put(W, 'Customer', { id: 'c999', tier: 'gold' });
    const old: State = { objects: { ...state.objects, Customer: new Map(before) }, links: state.links };
    for (const where of [{ tier: 'gold' }, { score: { $gt: 90 } }, {}, { $link: { type: 'placed' } }]) {
      const at = await all(W, 'Customer', { where, at: String(commit), pageSize: 13 });
      expect(at.commit).toBe(commit);
      expect(at.objects.map((o) => o.pk).sort(), JSON.stringify(where)).toEqual(expected(old, 'Customer', where));
    }
    // Now: the changes are seen (the reference follows them).
    for (const pk of changed) Object.assign(state.objects.Customer?.get(pk) as Props, { tier: 'gold', score: 99.5 });
    state.objects.Customer?.delete('c007');
    for (const l of [...state.links]) if (JSON.parse(l).includes('c007')) state.links.delete(l);
    state.objects.Customer?.set('c999', { id: 'c999', tier: 'gold' });
    const now = await all(W, 'Customer', { where: { tier: 'gold' }, pageSize: 50 });
    expect(now.commit).toBeGreaterThan(commit);
    expect(now.objects.map((o) => o.pk).sort()).toEqual(expected(state, 'Customer', { tier: 'gold' }));
  });

  it('queries and aggregates a depth-3 fork through its chain', async () => {
    // qw → f1 → f2 → f3, each changing what it inherits.
    const f: State = { objects: { Customer: new Map(), Order: new Map() }, links: new Set(state.links) };
    for (const [k, v] of state.objects.Customer ?? []) f.objects.Customer?.set(k, structuredClone(v));
    for (const [k, v] of state.objects.Order ?? []) f.objects.Order?.set(k, structuredClone(v));
    let base = W;
    for (const [depth, id] of ['qf1', 'qf2', 'qf3'].entries()) {
      await forkThroughControl(s, id, base);
      await s.control.app.pg.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [id]);
      const patched = `c0${10 + depth}`;
      const res = await s.dataCall('PATCH', `/v1/worlds/${id}/objects/Customer/${patched}`, {
        body: { properties: { tier: 'bronze', score: 1 } },
      });
      expect(res.statusCode, res.body).toBe(200);
      Object.assign(f.objects.Customer?.get(patched) as Props, { tier: 'bronze', score: 1 });
      const gone = `c0${20 + depth}`;
      expect((await s.dataCall('DELETE', `/v1/worlds/${id}/objects/Customer/${gone}`)).statusCode).toBe(204);
      f.objects.Customer?.delete(gone);
      for (const l of [...f.links]) if (JSON.parse(l).includes(gone)) f.links.delete(l);
      const added = { id: `f${depth}`, tier: 'gold', score: 77.5 };
      await put(id, 'Customer', added);
      f.objects.Customer?.set(added.id, added);
      const order = `o0${depth}0`;
      await put(id, 'Order', { id: order, amount: 150 + depth, status: 'open' });
      Object.assign(f.objects.Order?.get(order) as Props, { amount: 150 + depth, status: 'open' });
      // Orders o110… were never linked (placed is ONE_TO_MANY).
      await link(id, 'placed', added.id, `o14${depth}`);
      f.links.add(JSON.stringify(['placed', added.id, `o14${depth}`]));
      base = id;
    }
    for (const where of WHERES) {
      const { objects } = await all('qf3', 'Customer', { where, pageSize: 41, allowScan: true });
      expect(objects.map((o) => o.pk).sort(), JSON.stringify(where)).toEqual(expected(f, 'Customer', where));
    }
    const res = await aggregate('qf3', 'Customer', {
      groupBy: [{ property: 'tier', type: 'exact' }],
      metrics: [
        { name: 'n', op: 'count' },
        { name: 'total', op: 'sum', property: 'score' },
      ],
    });
    expect(res.statusCode, res.body).toBe(200);
    const want = new Map<unknown, { n: number; total: number | null }>();
    for (const c of f.objects.Customer?.values() ?? []) {
      const g = want.get(c.tier ?? null) ?? { n: 0, total: null };
      g.n++;
      if (typeof c.score === 'number') g.total = (g.total ?? 0) + c.score;
      want.set(c.tier ?? null, g);
    }
    const got = res.json().groups as { key: { tier: unknown }; metrics: { n: number; total: number | null } }[];
    expect(got.length).toBe(want.size);
    for (const g of got) {
      const w = want.get(g.key.tier);
      expect(g.metrics.n).toBe(w?.n);
      if (w?.total === null) expect(g.metrics.total).toBeNull();
      else expect(g.metrics.total).toBeCloseTo(w?.total as number, 6);
    }
  }, 180_000);

  it('aggregates exactly, against the GROUP BY computed from the rows written', async () => {
    const orders = [...(state.objects.Order?.values() ?? [])];
    const res = await aggregate(W, 'Order', {
      where: { amount: { $gte: 10 } },
      groupBy: [
        { property: 'status', type: 'exact' },
        { property: 'amount', type: 'ranges', ranges: [{ to: 50 }, { from: 50, to: 150 }, { from: 100 }] },
        { property: 'placed', type: 'bucket', interval: 'month' },
      ],
      metrics: [
        { name: 'n', op: 'count' },
        { name: 'sum', op: 'sum', property: 'amount' },
        { name: 'avg', op: 'avg', property: 'amount' },
        { name: 'min', op: 'min', property: 'amount' },
        { name: 'max', op: 'max', property: 'placed' },
        { name: 'distinct', op: 'approximateDistinct', property: 'status' },
      ],
    });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body.commit).toBeGreaterThan(0);
    const ranges = [{ to: 50 }, { from: 50, to: 150 }, { from: 100 }];
    const want = new Map<string, Props[]>();
    for (const o of orders) {
      if ((o.amount as number) < 10) continue;
      for (const r of ranges) {
        const a = o.amount as number;
        if ((r.from !== undefined && a < r.from) || (r.to !== undefined && a >= r.to)) continue;
        const month = o.placed ? `${(o.placed as string).slice(0, 7)}-01T00:00:00.000Z` : null;
        const key = JSON.stringify({ status: o.status, amount: r, placed: month });
        want.set(key, [...(want.get(key) ?? []), o]);
      }
    }
    const got = new Map<string, Record<string, unknown>>(
      body.groups.map((g: { key: Props; metrics: Props }) => [JSON.stringify(g.key), g.metrics]),
    );
    expect([...got.keys()].sort()).toEqual([...want.keys()].sort());
    for (const [key, rows] of want) {
      const amounts = rows.map((r) => r.amount as number);
      const m = got.get(key) as Record<string, number | string>;
      expect(m.n).toBe(rows.length);
      expect(m.sum).toBe(amounts.reduce((a, b) => a + b, 0));
      expect(m.avg).toBeCloseTo(amounts.reduce((a, b) => a + b, 0) / rows.length, 9);
      expect(m.min).toBe(Math.min(...amounts));
      expect(m.max).toBe(
        rows
          .map((r) => r.placed as string)
          .sort()
          .at(-1),
      );
      expect(m.distinct).toBe(1);
    }
    // No groupBy: one group, key {}.
    const whole = await aggregate(W, 'Order', { metrics: [{ name: 'n', op: 'count' }] });
    expect(whole.json().groups).toEqual([{ key: {}, metrics: { n: orders.length } }]);
    // Days of a date property, and values over maxGroups refused.
    const days = await aggregate(W, 'Customer', {
      groupBy: [{ property: 'joined', type: 'bucket', interval: 'year' }],
      metrics: [{ name: 'n', op: 'count' }],
    });
    expect(days.statusCode, days.body).toBe(200);
    const customers = [...(state.objects.Customer?.values() ?? [])];
    expect(days.json().groups).toEqual([
      { key: { joined: '2025-01-01' }, metrics: { n: customers.filter((c) => c.joined).length } },
      { key: { joined: null }, metrics: { n: customers.filter((c) => !c.joined).length } },
    ]);
    const over = await aggregate(W, 'Order', {
      groupBy: [{ property: 'amount', type: 'exact', maxGroups: 5 }],
      metrics: [{ name: 'n', op: 'count' }],
    });
    expect(expectProblem(over, 422).errors).toEqual([
      { path: 'body/groupBy/0/maxGroups', message: expect.any(String) },
    ]);
  });

  it('refuses bad input naming the JSON path and the rule, writing nothing', async () => {
    const head = await dataHead();
    const deep: Where = { name: 'x' };
    let w: Where = deep;
    for (let i = 0; i < 17; i++) w = { $not: w };
    const cases: [unknown, string, number][] = [
      [{ where: { $and: [{ tier: 'gold' }, { price: { $gt: 1 } }] } }, 'body/where/$and/1/price', 400],
      [{ where: { $and: [{ tier: 'gold' }, { score: { $gt: 'high' } }] } }, 'body/where/$and/1/score/$gt', 400],
      [{ where: { score: { $near: 1 } } }, 'body/where/score', 400],
      [{ where: { tier: 'platinum' } }, 'body/where/tier', 400],
      [{ where: { tags: { $gt: 'a' } } }, 'body/where/tags/$gt', 400],
      [{ where: { joined: { $gte: '2025-02-30' } } }, 'body/where/joined/$gte', 400],
      [{ where: { $link: { type: 'owns' } } }, 'body/where/$link/type', 400],
      [
        { where: { $link: { type: 'placed', where: { amount: { $gt: 1.5 } } } } },
        'body/where/$link/where/amount/$gt',
        400,
      ],
      [{ where: { bio: { $containsAnyTerm: '---' } } }, 'body/where/bio/$containsAnyTerm', 400],
      [{ where: w }, expect.stringMatching(/^body\/where(\/\$not){16}/), 400],
      [{ where: { $or: Array.from({ length: 201 }, () => ({ tier: 'gold' })) } }, 'body/where', 400],
      [{ orderBy: [{ property: 'tags' }] }, 'body/orderBy/0/property', 400],
      [{ select: ['nope'] }, 'body/select/0', 400],
      [{ pivotTo: ['placed', 'refers'] }, 'body/pivotTo/1', 400],
      [{ pageSize: 0 }, 'body/pageSize', 400],
      [{ pageSize: 1001 }, 'body/pageSize', 400],
    ];
    for (const [body, path, status] of cases) {
      const res = await query(W, 'Customer', body);
      const problem = expectProblem(res, status);
      expect(problem.errors, JSON.stringify(body)).toContainEqual({ path, message: expect.any(String) });
    }
    const grouped = await aggregate(W, 'Customer', {
      groupBy: [{ property: 'address', type: 'exact' }],
      metrics: [{ name: 'n', op: 'sum', property: 'tier' }],
    });
    expect(expectProblem(grouped, 400).errors).toEqual([
      { path: 'body/groupBy/0/property', message: expect.stringMatching(/cannot be grouped/) },
      { path: 'body/metrics/0/property', message: expect.stringMatching(/sum does not apply/) },
    ]);
    expect(await dataHead()).toBe(head);
  });

  it('binds page tokens to their query and world, signed', async () => {
    const first = await query(W, 'Customer', { where: { tier: 'gold' }, pageSize: 2 });
    const token = first.json().nextPageToken as string;
    expect(token).toEqual(expect.any(String));
    const [payload, mac] = token.split('.') as [string, string];
    const position = JSON.parse(Buffer.from(payload, 'base64url').toString());
    position.c -= 1;
    const forged = `${Buffer.from(JSON.stringify(position)).toString('base64url')}.${mac}`;
    const tampered = await query(W, 'Customer', { where: { tier: 'gold' }, pageSize: 2, pageToken: forged });
    expect(expectProblem(tampered, 400).errors).toEqual([
      { path: 'body/pageToken', message: expect.stringMatching(/altered/) },
    ]);
    const other = await query(W, 'Customer', { where: { tier: 'silver' }, pageSize: 2, pageToken: token });
    expect(expectProblem(other, 400).errors).toEqual([
      { path: 'body/pageToken', message: expect.stringMatching(/another query/) },
    ]);
    const second = await query(W, 'Customer', { where: { tier: 'gold' }, pageSize: 2, pageToken: token });
    expect(second.statusCode, second.body).toBe(200);
    expect(second.json().commit).toBe(first.json().commit);
  });

  it('refuses a scan over QUERY_SCAN_LIMIT without an index, naming the property; the primary key and indexes serve', async () => {
    await bulk(
      W,
      'Item',
      Array.from({ length: SCAN_LIMIT + 50 }, (_, i) => ({
        id: `i${i}`,
        n: i,
        group: `g${i % 20}`,
        free: `f${i % 3}`,
      })),
    );
    const scan = await query(W, 'Item', { where: { free: 'f1' } });
    const problem = expectProblem(scan, 422);
    expect(problem.errors).toEqual([{ path: 'body/where/free', message: expect.stringMatching(/index free/) }]);
    const allowed = await all(W, 'Item', { where: { free: 'f1' }, allowScan: true, pageSize: 1000 });
    expect(allowed.objects.length).toBe(Math.ceil((SCAN_LIMIT + 50 - 1) / 3));
    // The primary key is always queryable; an indexed property narrows an unindexed one.
    expect((await query(W, 'Item', { where: { id: 'i7' } })).json().objects.map((o: { pk: string }) => o.pk)).toEqual([
      'i7',
    ]);
    const narrowed = await all(W, 'Item', { where: { n: { $lt: 30 }, free: 'f1' } });
    expect(narrowed.objects.length).toBe(10);
    const unindexedOrder = await query(W, 'Item', { orderBy: [{ property: 'free' }] });
    expect(expectProblem(unindexedOrder, 422).errors[0].path).toBe('body/orderBy/0/property');
    const agg = await aggregate(W, 'Item', { where: { free: 'f1' }, metrics: [{ name: 'n', op: 'count' }] });
    expect(expectProblem(agg, 422).errors[0].path).toBe('body/where/free');
    // Indexes of each kind for indexed properties: B-tree, GIN of arrays and of words.
    await s.until('the indexes of Customer built', async () => {
      const { rows } = await s.data.app.pg.query<{ kind: string; property: string; state: string }>(
        `SELECT kind, property, state FROM storage_indexes WHERE object_type = 'Customer' ORDER BY property, kind`,
      );
      return rows.every((r) => r.state === 'ready') ? rows : undefined;
    });
    const { rows } = await s.data.app.pg.query<{ kind: string; property: string }>(
      `SELECT kind, property FROM storage_indexes WHERE object_type = 'Customer' ORDER BY property, kind`,
    );
    expect(rows).toEqual([
      { property: 'bio', kind: 'btree' },
      { property: 'bio', kind: 'text' },
      { property: 'joined', kind: 'btree' },
      { property: 'name', kind: 'btree' },
      { property: 'name', kind: 'text' },
      { property: 'tags', kind: 'btree' },
      { property: 'tags', kind: 'gin' },
      { property: 'tier', kind: 'btree' },
    ]);
    const defs = await s.data.app.pg.query<{ indexdef: string }>(
      `SELECT indexdef FROM pg_indexes WHERE tablename = 'object_heads' AND indexdef LIKE '%USING gin%'`,
    );
    expect(defs.rows.map((r) => r.indexdef).join('\n')).toMatch(
      /to_tsvector\('simple'::regconfig, \(properties ->> 'bio'/,
    );
    expect(defs.rows.map((r) => r.indexdef).join('\n')).toMatch(/properties -> 'tags'::text\)+ jsonb_path_ops/);
    // The compiled conditions are the indexes' expressions: with plain scans off, the planner
    // reaches the rows through the index each condition needs (GINs are not led by the world).
    const doc = await s.data.app.schemaReplica.document(s.data.app.pg, W, await schemaVersionOf(W));
    const type = doc.objectTypes.Customer as NonNullable<(typeof doc.objectTypes)[string]>;
    await s.data.app.pg.query('ANALYZE object_heads');
    for (const [where, index, world] of [
      [{ tags: { $contains: 'red' } }, indexName('Customer', 'tags', 'gin'), false],
      [{ bio: { $containsAllTerms: 'red blue' } }, indexName('Customer', 'bio', 'text'), false],
      [{ tier: { $in: ['gold'] } }, indexName('Customer', 'tier'), true],
    ] as const) {
      const params: unknown[] = [];
      const condition = compileWhere(parseWhere(doc, type, where), {
        param: (v) => {
          params.push(v);
          return `$${params.length}`;
        },
        linkExists: () => 'false',
      });
      const client = await s.data.app.pg.connect();
      try {
        await client.query('BEGIN');
        await client.query('SET LOCAL enable_seqscan = off');
        await client.query('SET LOCAL enable_indexscan = off');
        const plan = await client.query<Record<string, string>>(
          `EXPLAIN SELECT r.pk FROM object_heads r
            WHERE ${world ? `r.world_id = '${W}' AND ` : ''}r.type = 'Customer' AND NOT r.deleted AND ${condition}`,
          params,
        );
        expect(plan.rows.map((row) => row['QUERY PLAN']).join('\n'), JSON.stringify(where)).toContain(index);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    }
  });

  it('returns each object present at the pinned commit exactly once while two writers insert, update and delete', async () => {
    const P = 'qp';
    await s.world(P, schema);
    const N = 10_000;
    for (let b = 0; b < N; b += 2500) {
      await bulk(
        P,
        'Order',
        Array.from({ length: 2500 }, (_, i) => ({
          id: `p${String(b + i).padStart(5, '0')}`,
          amount: (b + i) % 997,
          status: 'open',
        })),
      );
    }
    let stop = false;
    const writer = async (seed: number) => {
      const rnd = random(seed);
      let n = 0;
      while (!stop) {
        const pk = `p${String(Math.floor(rnd() * N)).padStart(5, '0')}`;
        const r = rnd();
        if (r < 0.4) {
          await s.dataCall('PATCH', `/v1/worlds/${P}/objects/Order/${pk}`, {
            body: { properties: { amount: Math.floor(rnd() * 997), status: 'paid' } },
          });
        } else if (r < 0.7) await s.dataCall('DELETE', `/v1/worlds/${P}/objects/Order/${pk}`);
        else await put(P, 'Order', { id: `n${seed}-${n++}`, amount: Math.floor(rnd() * 997), status: 'new' });
      }
    };
    // A writer's failure stops both and fails the test after the pages (never an unhandled rejection).
    const failures: unknown[] = [];
    const writers = [1, 2].map((seed) =>
      writer(seed).catch((error) => {
        failures.push(error);
        stop = true;
      }),
    );
    try {
      // Let the writers get going, then page the whole set, ordered by a property they change.
      await new Promise((r) => setTimeout(r, 300));
      const seen = await all(P, 'Order', {
        where: { amount: { $gte: 0 } },
        orderBy: [{ property: 'amount', direction: 'desc' }],
        pageSize: 500,
      });
      stop = true;
      await Promise.all(writers);
      expect(failures).toEqual([]);
      // The state at the pinned commit, from every version stored (heads and history).
      const { rows } = await s.data.app.pg.query<{ pk: string; version: string }>(
        `SELECT DISTINCT ON (pk) pk, version, deleted FROM object_versions
          WHERE world_id = $1 AND type = 'Order' AND seq <= $2 ORDER BY pk, seq DESC`,
        [P, seen.commit],
      );
      const live = (rows as unknown as { pk: string; version: string; deleted: boolean }[])
        .filter((r) => !r.deleted)
        .map((r) => `${r.pk}@${r.version}`)
        .sort();
      const got = seen.objects.map((o) => `${o.pk}@${o.version}`);
      expect(new Set(got).size).toBe(got.length);
      expect(got.sort()).toEqual(live);
      expect(live.length).toBeGreaterThan(N / 2);
      const after = await s.data.app.pg.query<{ n: string }>(
        `SELECT count(*) AS n FROM object_versions WHERE world_id = $1 AND seq > $2`,
        [P, seen.commit],
      );
      // The writers did write while the pages were read.
      expect(Number(after.rows[0]?.n)).toBeGreaterThan(0);
    } finally {
      stop = true;
      await Promise.all(writers);
    }
  }, 300_000);
});

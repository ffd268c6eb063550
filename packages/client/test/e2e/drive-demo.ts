/**
 * Drives the demo world through the client generated for it (packages/client/test/sdk.int.spec.ts
 * generates ./generated/demo.ts, compiles this file with tsc --strict, then runs it): CRUD with
 * If-Match, read-your-writes into intelligence, an action checked then run, retries, and the
 * error when the schema moves. Prints one JSON line of what it saw; the spec checks it and the
 * stored state.
 */
import {
  type Fetch,
  OntoClient,
  PreconditionFailedError,
  SchemaMovedError,
  UnprocessableError,
} from '../../src/index.js';
import { demo } from './generated/demo.js';

declare const process: { env: Record<string, string | undefined> };
declare const console: { log(...values: unknown[]): void };
const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const realFetch = (globalThis as unknown as { fetch: Fetch }).fetch;

// A fetch that answers the first read of o-sdk with 503 Retry-After: 1 (the client waits and asks
// again) and loses the answer of the first action run (the client sends it again, same key).
const seen = { unavailable: 0, lost: 0, actionKeys: [] as string[], retriedAfterMs: 0 };
let firstRefusedAt = 0;
const flaky: Fetch = async (url, init) => {
  if (init.method === 'GET' && url.endsWith('/objects/Order/o-sdk') && seen.unavailable === 0) {
    seen.unavailable++;
    firstRefusedAt = Date.now();
    return {
      status: 503,
      headers: { get: (n: string) => ({ 'retry-after': '1', 'content-type': 'application/problem+json' })[n] ?? null },
      text: async () => '{"type":"https://onto.dev/problems/unavailable","title":"Service Unavailable","status":503}',
    };
  }
  if (init.method === 'GET' && url.endsWith('/objects/Order/o-sdk') && firstRefusedAt && !seen.retriedAfterMs) {
    seen.retriedAfterMs = Date.now() - firstRefusedAt;
  }
  if (init.method === 'POST' && /\/actions\/shipOrder$/.test(url) && !init.body?.includes('validateOnly')) {
    seen.actionKeys.push(init.headers['idempotency-key'] ?? '');
    const res = await realFetch(url, init);
    if (seen.lost === 0) {
      seen.lost++;
      await res.text();
      throw new TypeError('fetch failed: the connection was reset');
    }
    return res;
  }
  return realFetch(url, init);
};

const client = new OntoClient({
  control: env('ONTO_CONTROL_URL'),
  data: env('ONTO_DATA_URL'),
  intelligence: env('ONTO_INTELLIGENCE_URL'),
  apiToken: env('ONTO_API_TOKEN'),
  fetch: flaky,
  retry: { attempts: 4, baseDelayMs: 50 },
});
const world = client.world(demo);
const Order = world.objects.Order;

// CRUD with ETags: create, read (through a 503 retried), change with If-Match, a stale If-Match refused.
const created = await Order.put('o-sdk', { id: 'o-sdk', amount: 250, status: 'open', lines: [{ sku: 'SDK', qty: 2 }] });
const read = await Order.get('o-sdk');
const patched = await Order.patch('o-sdk', { amount: 300 }, { ifMatch: read.etag });
let stale: { status: number; currentVersion: unknown } | undefined;
try {
  await Order.patch('o-sdk', { amount: 999 }, { ifMatch: created.version });
} catch (error) {
  if (!(error instanceof PreconditionFailedError)) throw error;
  stale = { status: error.status, currentVersion: error.body.currentVersion };
}
let invalid: { status: number; paths: string[] } | undefined;
try {
  // A value of the wrong type that only a cast gets past the compiler: the service names its path.
  await Order.patch('o-sdk', { amount: 'lots' as unknown as number });
} catch (error) {
  if (!(error instanceof UnprocessableError)) throw error;
  invalid = { status: error.status, paths: error.errors.map((e) => e.path) };
}

// Read-your-writes into intelligence: o-3 belongs to c-1, whose totalSpent sums its orders.
await Order.patch('o-3', { amount: 530 });
const writtenAt = world.consistency.data ?? 0;
const derived = await world.objects.Customer.derived('c-1');

// The read model: customers by a derived value, a page at a time (one commit), and its sum.
const spenders = await world.objects.Customer.readModel()
  .where({ 'derived.totalSpent': { $gt: 0 } })
  .orderBy('derived.totalSpent', 'desc')
  .pageSize(1)
  .allowScan()
  .all();
const spent = await world.objects.Customer.aggregateReadModel({
  where: { 'derived.totalSpent': { $gt: 0 } },
  metrics: [{ name: 'total', op: 'sum', property: 'derived.totalSpent' }],
});
const spentOf = (o: (typeof spenders)[number]) =>
  (o as unknown as { derived: { totalSpent: number } }).derived.totalSpent;

// An action checked without running, refused parameters named by path, then run for real.
const check = await world.actions.shipOrder.validate({ order: 'o-sdk' });
const afterCheck = await Order.get('o-sdk');
const refused = await world.actions.shipOrder.validate({} as { order: string });
const run = await world.actions.shipOrder.apply({ order: 'o-sdk' }, { wait: true });
const shipped = await Order.get('o-sdk');

// A batch: o-1 shipped under its own key, a refused item answered alone; sent again, each replays.
const batchItems = [
  { parameters: { order: 'o-1' }, idempotencyKey: 'sdk-batch-o-1' },
  { parameters: {} as { order: string }, idempotencyKey: 'sdk-batch-refused' },
];
const batch = await world.actions.shipOrder.applyBatch(batchItems);
const batchAgain = await world.actions.shipOrder.applyBatch(batchItems);
const batchOf = (results: typeof batch) =>
  results.map((r) => ({
    status: r.status,
    replayed: r.replayed,
    action: r.action?.id ?? null,
    paths: r.problem?.errors.map((e) => e.path) ?? [],
  }));

// The world's schema moves incompatibly (a new required property of Customer): a client made
// from the same generated module refuses to run, naming what moved.
await client.transport.call('control', {
  method: 'PUT',
  path: '/v1/worlds/demo/object-types/Customer',
  body: {
    displayName: 'Customer',
    primaryKey: 'id',
    properties: {
      id: { type: 'string', required: true },
      name: { type: 'string', required: true, indexed: true },
      tier: { type: { type: 'enum', values: ['standard', 'gold'] } },
      basket: { type: { type: 'series', value: 'double' }, unit: 'EUR', retention: '30d' },
      loyalty: { type: 'integer', required: true },
    },
  },
});
let moved: { message: string; paths: string[] } | undefined;
try {
  await client.world(demo).objects.Customer.get('c-1');
} catch (error) {
  if (!(error instanceof SchemaMovedError)) throw error;
  moved = { message: error.message, paths: error.changes.map((c) => c.path) };
}

console.log(
  JSON.stringify({
    created: { version: created.version, etag: created.etag },
    read: { version: read.version, amount: read.properties.amount },
    patched: { version: patched.version, amount: patched.properties.amount },
    stale,
    invalid,
    writtenAt,
    derived: derived.totalSpent,
    readModel: {
      pks: spenders.map((o) => o.pk),
      totals: spenders.map(spentOf),
      sum: spent.groups[0]?.metrics.total ?? null,
    },
    check,
    statusAfterCheck: afterCheck.properties.status,
    refused,
    run: { status: run.status, replayed: run.replayed, id: run.id },
    shipped: { status: shipped.properties.status, version: shipped.version },
    batch: batchOf(batch),
    batchAgain: batchOf(batchAgain),
    seen,
    moved,
    query: Order.query()
      .where({ amount: { $gte: 100 }, status: { $in: ['open', 'shipped'] } })
      .orderBy('amount', 'desc')
      .select('id', 'amount')
      .pageSize(50)
      .toJSON(),
  }),
);

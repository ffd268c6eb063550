#!/usr/bin/env node
// The demo world that `./onto up` creates on a running stack: a world `demo` with a small
// ontology (customers, orders, the link between them, and an action). Safe to run again.
const CONTROL = process.env.ONTO_CONTROL_URL ?? 'http://127.0.0.1:4001';
const DATA = process.env.ONTO_DATA_URL ?? 'http://127.0.0.1:4002';
const bootstrap = process.env.ONTO_BOOTSTRAP_TOKEN;
if (!bootstrap) throw new Error('ONTO_BOOTSTRAP_TOKEN is not set');

async function call(method, path, { token, body, ifMatch, base = CONTROL, headers = {} } = {}) {
  const res = await fetch(base + path, {
    method,
    headers: {
      ...headers,
      ...(body ? { 'content-type': 'application/json' } : {}),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(ifMatch !== undefined ? { 'if-match': `"${ifMatch}"` } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  return { status: res.status, json };
}

const must = (res, ...ok) => {
  if (!ok.includes(res.status)) throw new Error(`unexpected ${res.status}: ${JSON.stringify(res.json)}`);
  return res.json;
};

const { accessToken: token } = must(await call('POST', '/v1/auth/token', { body: { apiToken: bootstrap } }), 200);
must(await call('POST', '/v1/worlds', { token, body: { id: 'demo' } }), 202, 409);
for (let i = 0; ; i++) {
  const world = must(await call('GET', '/v1/worlds/demo', { token }), 200);
  if (world.status === 'READY') break;
  if (world.status === 'FAILED' || i > 100) throw new Error(`world demo is ${world.status}: ${world.failure}`);
  await new Promise((r) => setTimeout(r, 200));
}

const types = [
  [
    'object-types/Customer',
    {
      displayName: 'Customer',
      primaryKey: 'id',
      properties: {
        id: { type: 'string', required: true },
        name: { type: 'string', required: true, indexed: true },
        tier: { type: { type: 'enum', values: ['standard', 'gold'] } },
      },
    },
  ],
  [
    'object-types/Order',
    {
      displayName: 'Order',
      primaryKey: 'id',
      properties: {
        id: { type: 'string', required: true },
        amount: { type: 'integer', required: true, indexed: true },
        status: { type: { type: 'enum', values: ['open', 'shipped', 'cancelled'] } },
        placedAt: { type: 'timestamp' },
        lines: { type: { type: 'array', items: { type: 'struct', fields: { sku: 'string', qty: 'integer' } } } },
      },
    },
  ],
  // One customer, many orders: each order has at most one customer.
  ['link-types/orders', { displayName: 'orders', from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' }],
  [
    'action-types/shipOrder',
    {
      displayName: 'Ship an order',
      parameters: { order: { type: 'string', required: true } },
      edits: [
        { op: 'modifyObject', objectType: 'Order', pk: { param: 'order' }, values: { status: { value: 'shipped' } } },
      ],
      idempotencyKey: ['order'],
    },
  ],
];
for (const [path, body] of types) {
  const { version } = must(await call('GET', '/v1/worlds/demo/schema', { token }), 200);
  must(await call('PUT', `/v1/worlds/demo/${path}`, { token, body, ifMatch: version }), 200);
}
const schema = must(await call('GET', '/v1/worlds/demo/schema', { token }), 200);
console.log(
  `demo world READY, schema version ${schema.version}: ${Object.keys(schema.objectTypes).join(', ')}; ` +
    `links ${Object.keys(schema.linkTypes).join(', ')}; actions ${Object.keys(schema.actionTypes).join(', ')}`,
);

// Objects and links in data. The consistency token makes data wait until its replica of the
// schema has caught up with the version control just answered.
const consistent = { 'x-consistency-token': `control=${schema.version}` };
const customers = [
  { id: 'c-1', name: 'Ada Lovelace', tier: 'gold' },
  { id: 'c-2', name: 'Alan Turing', tier: 'standard' },
];
const orders = [
  {
    id: 'o-1',
    amount: 1200,
    status: 'open',
    placedAt: '2026-11-28T09:30:00.000Z',
    lines: [{ sku: 'ANL-ENG', qty: 1 }],
    customer: 'c-1',
  },
  {
    id: 'o-2',
    amount: 80,
    status: 'shipped',
    placedAt: '2026-11-28T11:00:00.000Z',
    lines: [{ sku: 'BOMBE', qty: 2 }],
    customer: 'c-2',
  },
  { id: 'o-3', amount: 430, status: 'open', placedAt: '2026-11-29T08:15:00.000Z', lines: [], customer: 'c-1' },
];
for (const c of customers) {
  must(
    await call('PUT', `/v1/worlds/demo/objects/Customer/${c.id}`, {
      base: DATA,
      token,
      body: { properties: c },
      headers: consistent,
    }),
    200,
    201,
  );
}
for (const { customer, ...o } of orders) {
  must(
    await call('PUT', `/v1/worlds/demo/objects/Order/${o.id}`, {
      base: DATA,
      token,
      body: { properties: o },
      headers: consistent,
    }),
    200,
    201,
  );
  must(
    await call('PUT', `/v1/worlds/demo/links/orders/${customer}/${o.id}`, { base: DATA, token, headers: consistent }),
    200,
    201,
  );
}
const open = must(
  await call('GET', '/v1/worlds/demo/objects/Order?filter=amount:gte:100&sort=-amount', { base: DATA, token }),
  200,
);
const placed = must(await call('GET', '/v1/worlds/demo/objects/Customer/c-1/links/orders', { base: DATA, token }), 200);
console.log(
  `demo data: ${customers.length} customers, ${orders.length} orders linked to them; orders of 100 or more, largest first: ` +
    `${JSON.stringify(open)}; orders of c-1: ${JSON.stringify(placed)}`.slice(0, 600),
);

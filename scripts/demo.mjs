#!/usr/bin/env node
// The demo world that `./onto up` creates on a running stack: a world `demo` with a small
// ontology (customers, orders, the link between them, two actions), objects and links in data,
// and in intelligence a derived property, a rule that fires, a decision that runs an action on
// its own, an idempotent action run twice, and a customer's time series with a rule over its
// hourly average. Safe to run again.
const CONTROL = process.env.ONTO_CONTROL_URL ?? 'http://127.0.0.1:4001';
const DATA = process.env.ONTO_DATA_URL ?? 'http://127.0.0.1:4002';
const INTELLIGENCE = process.env.ONTO_INTELLIGENCE_URL ?? 'http://127.0.0.1:4003';
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
        basket: { type: { type: 'series', value: 'double' }, unit: 'EUR', retention: '30d' },
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
  [
    'action-types/upgradeCustomer',
    {
      displayName: 'Make a customer gold',
      parameters: { customer: { type: 'string', required: true } },
      edits: [
        {
          op: 'modifyObject',
          objectType: 'Customer',
          pk: { param: 'customer' },
          values: { tier: { value: 'gold' } },
        },
      ],
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

// intelligence: what a customer has spent (a derived property over its linked orders), a rule on
// it, and a decision that upgrades the customer when the rule fires, without a human.
const intel = (method, path, opts = {}) => call(method, path, { base: INTELLIGENCE, token, ...opts });
must(
  await intel('PUT', '/v1/worlds/demo/derived-properties/totalSpent', {
    body: {
      objectType: 'Customer',
      expression: 'agg.spent',
      aggregates: { spent: { function: 'sum', linkType: 'orders', property: 'amount' } },
      maxStalenessMs: 5000,
      description: 'the sum of the amounts of the customer’s orders',
    },
    headers: consistent,
  }),
  200,
  201,
);
must(
  await intel('PUT', '/v1/worlds/demo/rules/bigSpender', {
    body: {
      objectType: 'Customer',
      condition: "derived.totalSpent >= 1500 && self.tier != 'gold'",
      alertType: 'big-spender',
      severity: 'info',
      description: 'a standard customer who has spent 1,500 or more',
    },
  }),
  200,
  201,
);
must(
  await intel('PUT', '/v1/worlds/demo/decision-definitions/upgradeBigSpenders', {
    body: {
      rule: 'bigSpender',
      actionType: 'upgradeCustomer',
      parameters: { customer: 'self.id' },
      approval: 'automatic',
    },
  }),
  200,
  201,
);

// Alan Turing (standard) places a large order: his total crosses 1,500, the rule fires, the
// decision upgrades him through the upgradeCustomer action (a saga that data applies).
const big = { id: 'o-4', amount: 1600, status: 'open', placedAt: '2026-11-29T10:00:00.000Z', lines: [] };
const put = must(
  await call('PUT', '/v1/worlds/demo/objects/Order/o-4', {
    base: DATA,
    token,
    body: { properties: big },
    headers: consistent,
  }),
  200,
  201,
);
must(await call('PUT', '/v1/worlds/demo/links/orders/c-2/o-4', { base: DATA, token, headers: consistent }), 200, 201);
const until = async (what, probe) => {
  for (let i = 0; i < 150; i++) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`demo: timed out waiting for ${what}`);
};
const turing = await until('the derived total of c-2', async () => {
  const res = await intel('GET', '/v1/worlds/demo/objects/Customer/c-2');
  return res.status === 200 && res.json.derived?.totalSpent?.value === 1680 ? res.json : undefined;
});
const alerts = must(await intel('GET', '/v1/worlds/demo/alerts?rule=bigSpender&pk=c-2'), 200).alerts;
const upgraded = await until('the upgrade of c-2 in data', async () => {
  const res = await call('GET', '/v1/worlds/demo/objects/Customer/c-2', { base: DATA, token });
  return res.json?.properties?.tier === 'gold' ? res.json : undefined;
});
const decisions = must(await intel('GET', '/v1/worlds/demo/decisions?definition=upgradeBigSpenders'), 200).decisions;
console.log(
  `demo intelligence: c-2 totalSpent = ${turing.derived.totalSpent.value} (order ${big.id}, version ${put.version}); ` +
    `rule bigSpender raised ${alerts.length} alert(s) for c-2 [${alerts.map((a) => `${a.alertType} ${a.status}`).join(', ')}]; ` +
    `decision ${decisions[0]?.status ?? '?'} → upgradeCustomer → c-2 is now ${upgraded.properties.tier} in data ` +
    '(which makes the rule false again: the alert clears)',
);

// An idempotent action: the same request twice with one Idempotency-Key runs once.
const ship = (key) =>
  intel('POST', '/v1/worlds/demo/actions/shipOrder', {
    body: { parameters: { order: 'o-3' } },
    headers: { 'idempotency-key': key },
  });
const first = await ship('demo-ship-o-3');
const again = await ship('demo-ship-o-3');
must(first, 202, 200);
must(again, 202, 200);
const shipped = await until('o-3 shipped', async () => {
  const res = await intel('GET', `/v1/worlds/demo/actions/${first.json.id}`);
  return res.json?.status === 'COMPLETED' ? res.json : undefined;
});
console.log(
  `demo action: shipOrder o-3 sent twice with Idempotency-Key demo-ship-o-3 → one action ${shipped.id} ${shipped.status}` +
    ` (second answer is a replay of the first: same id ${again.json.id === first.json.id})`,
);

// Time series (docs/adr/0028): each customer's basket values over time in data, an hourly
// average over them in intelligence, and a rule on that average.
must(
  await intel('PUT', '/v1/worlds/demo/derived-properties/basketHourly', {
    body: {
      objectType: 'Customer',
      expression: 'agg.avg',
      aggregates: { avg: { function: 'avg', series: 'basket', window: '1h' } },
      description: 'the average basket value of the hour up to the latest one',
    },
  }),
  200,
  201,
);
must(
  await intel('PUT', '/v1/worlds/demo/rules/basketSurge', {
    body: {
      objectType: 'Customer',
      condition: 'derived.basketHourly > 500.0',
      alertType: 'basket-surge',
      severity: 'warning',
    },
  }),
  200,
  201,
);
const now = Date.now();
const baskets = [120, 180, 650, 720, 900].map((value, i) => ({
  time: new Date(now - (4 - i) * 600_000).toISOString(),
  value,
}));
must(
  await call('POST', '/v1/worlds/demo/series/Customer/c-1/basket', { base: DATA, token, body: { points: baskets } }),
  200,
);
const rollup = must(
  await call('GET', '/v1/worlds/demo/series/Customer/c-1/basket?bucket=10m&agg=max', { base: DATA, token }),
  200,
);
const surge = await until('the basket surge alert of c-1', async () => {
  const res = await intel('GET', '/v1/worlds/demo/alerts?rule=basketSurge&pk=c-1');
  return res.json?.alerts?.some((a) => a.status === 'OPEN') ? res.json.alerts : undefined;
});
const ada = must(await intel('GET', '/v1/worlds/demo/objects/Customer/c-1'), 200);
console.log(
  `demo series: ${baskets.length} basket values of c-1 (10-minute max: ${rollup.points.map((p) => p.value).join(', ')}); ` +
    `hourly average ${ada.derived.basketHourly.value} → rule basketSurge raised ${surge.filter((a) => a.status === 'OPEN').length} alert(s)`,
);

// Worlds as branches (docs/adr/0023, 0029): tag `demo` (control asks data and intelligence for
// their positions), fork `staging` at the tag (one row in data, whatever demo's size), cancel an
// order there only, and ask data what differs between the two worlds.
const ready = (world) =>
  until(`world ${world} to be READY`, async () => {
    const res = must(await call('GET', `/v1/worlds/${world}`, { token }), 200);
    if (res.status === 'FAILED' || res.status === 'DELETED') {
      throw new Error(`world ${world} is ${res.status}: ${JSON.stringify(res.failure)}`);
    }
    return res.status === 'READY' ? res : undefined;
  });
must(await call('PUT', '/v1/worlds/demo/tags/v1', { token, body: {} }), 201, 200);
const tag = await until('tag v1 of demo to be COMPLETE', async () => {
  const res = must(await call('GET', '/v1/worlds/demo/tags/v1', { token }), 200);
  return res.status === 'COMPLETE' ? res : undefined;
});
console.log(
  `demo tag: v1 of demo names schema version ${tag.ref.control}, data commit ${tag.ref.data}, ` +
    `intelligence watermark ${tag.ref.intelligence}`,
);
must(
  await call('POST', '/v1/worlds', { token, body: { id: 'staging', from: { world: 'demo', ref: 'v1' } } }),
  202,
  409,
);
const staging = await ready('staging');
const stagingSchema = must(await call('GET', '/v1/worlds/staging/schema', { token }), 200);
const inStaging = { 'x-consistency-token': `control=${stagingSchema.version}` };
must(
  await call('PATCH', '/v1/worlds/staging/objects/Order/o-1', {
    base: DATA,
    token,
    body: { properties: { status: 'cancelled' } },
    headers: inStaging,
  }),
  200,
);
const stillOpen = must(await call('GET', '/v1/worlds/demo/objects/Order/o-1', { base: DATA, token }), 200);
const diff = must(await call('GET', '/v1/worlds/staging/diff?against=demo', { base: DATA, token }), 200);
const shown = (value) => (value === null || value === undefined ? '∅' : JSON.stringify(value));
const changes = [
  ...diff.objects.map(
    (o) =>
      `  ${o.change} ${o.type} ${o.pk} (in ${o.side === 'to' ? 'staging' : o.side === 'from' ? 'demo' : 'both'}): ` +
      Object.entries(o.properties)
        .map(([name, p]) => `${name} ${shown(p.old)} → ${shown(p.new)}`)
        .join(', '),
  ),
  ...diff.links.map((l) => `  ${l.change} link ${l.linkType} ${l.fromPk} → ${l.toPk}`),
];
console.log(
  `demo fork: staging forked from demo at ${staging.from?.ref ?? 'its head'} (commit ${staging.from?.commit}); ` +
    `o-1 is ${stillOpen.properties.status} in demo; GET /v1/worlds/staging/diff?against=demo ` +
    `(demo at ${diff.from.commit}, staging at ${diff.to.commit}):\n${changes.join('\n') || '  no changes'}`,
);

// Merges (docs/adr/0037): take staging's changes back into demo (SOURCE_WINS), then change one
// order's amount in both worlds, so that a MANUAL merge stops at the conflict; it is resolved by a
// value and applied. Each run makes a fresh conflict: the amounts move on from what demo has.
const mergeInto = async (target, body) => {
  const { id } = must(await call('POST', `/v1/worlds/${target}/merges`, { token, body }), 202);
  return until(`merge ${id} to settle`, async () => {
    const m = must(await call('GET', `/v1/worlds/${target}/merges/${id}`, { token }), 200);
    if (m.status === 'FAILED' || m.status === 'COMPENSATED') {
      throw new Error(`merge ${id} is ${m.status}: ${JSON.stringify(m.failure)}`);
    }
    return m.status === 'MERGED' || m.status === 'CONFLICTS' ? m : undefined;
  });
};
const taken = await mergeInto('demo', { source: 'staging', strategy: 'SOURCE_WINS' });
// MERGED: data applied its part. (On a later run the demo has put o-1 back to open in demo, a change
// of the target since the last merge, which a merge keeps.)
const o1 = must(await call('GET', '/v1/worlds/demo/objects/Order/o-1', { base: DATA, token }), 200);
console.log(
  `demo merge: staging into demo (SOURCE_WINS) ${taken.status}, base ${taken.base ? `${taken.base.world} at data commit ${taken.base.dataSeq}` : 'none'}; ` +
    `o-1 is ${o1.properties.status} in demo`,
);
// Both worlds change o-2's amount to values of their own, whatever earlier runs left.
const amountIn = async (world) =>
  must(await call('GET', `/v1/worlds/${world}/objects/Order/o-2`, { base: DATA, token }), 200).properties.amount;
const amount = await amountIn('demo');
const stagingAmount = Math.max(amount, await amountIn('staging'));
for (const [world, value] of [
  ['demo', amount + 10],
  ['staging', stagingAmount + 20],
]) {
  must(
    await call('PATCH', `/v1/worlds/${world}/objects/Order/o-2`, {
      base: DATA,
      token,
      body: { properties: { amount: value } },
    }),
    200,
  );
}
const manual = await mergeInto('demo', { source: 'staging', strategy: 'MANUAL' });
const conflicts = manual.conflicts.map(
  (c) =>
    `${c.id} ${c.type} ${c.entity.type ?? c.entity.kind} ${c.entity.pk ?? c.entity.apiName ?? c.entity.name}` +
    `${c.entity.property ? `.${c.entity.property}` : ''}: base ${shown(c.base)}, staging ${shown(c.source)}, demo ${shown(c.target)}`,
);
for (const c of manual.conflicts) {
  const resolution = c.entity.property === 'amount' ? { take: 'value', value: amount + 15 } : { take: 'source' };
  must(await call('PUT', `/v1/worlds/demo/merges/${manual.id}/conflicts/${c.id}`, { token, body: resolution }), 200);
}
must(await call('POST', `/v1/worlds/demo/merges/${manual.id}/apply`, { token }), 202);
const applied = await until(`merge ${manual.id} to apply`, async () => {
  const m = must(await call('GET', `/v1/worlds/demo/merges/${manual.id}`, { token }), 200);
  if (m.status === 'FAILED' || m.status === 'COMPENSATED') {
    throw new Error(`merge ${manual.id} is ${m.status}: ${JSON.stringify(m.failure)}`);
  }
  return m.status === 'MERGED' ? m : undefined;
});
const o2After = await until('o-2 merged into demo', async () => {
  const o = must(await call('GET', '/v1/worlds/demo/objects/Order/o-2', { base: DATA, token }), 200);
  return o.properties.amount === amount + 15 ? o : undefined;
});
console.log(
  `demo merge: staging into demo (MANUAL) stopped at ${manual.status}:\n${conflicts.map((c) => `  ${c}`).join('\n') || '  none'}\n` +
    `  resolved by a value, applied: ${applied.status} at data commit ${applied.result?.dataSeq}; o-2's amount is ${o2After.properties.amount} in demo`,
);

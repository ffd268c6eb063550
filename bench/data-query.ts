/**
 * Object-set queries and aggregations in data (issue 30, ADR 47 and 48), each pair in one run:
 * - aggregation (count and sum grouped by a 20-value property) over N objects (default
 *   1,000,000) through POST …/aggregate against the same GROUP BY run by psql over the heads
 *   table: psql's time ÷ the endpoint's (goal ≥ 0.8);
 * - a filtered query on an indexed property (100 objects a page): p99 latency in a world of N
 *   objects ÷ in a world of 1,000 (goal ≤ 1.5);
 * - a link-predicate query (customers with an order over 100), every page, against the
 *   equivalent SQL join: the join's time ÷ the endpoint's (goal ≥ 0.5).
 *
 * The objects and links are inserted by SQL as data writes them (heads; links in heads and
 * history): setup, not what is measured. psql runs the statements as a client would, with its
 * own connection start-up excluded (\timing inside one session).
 *
 *   ./onto bench data-query [objects]      (default 1000000)
 */
import { spawn } from 'node:child_process';
import pg from 'pg';
import { fmt, libpqArgs, percentile, until } from './lib/harness.js';
import { benchStack, call } from './lib/stack.js';

const big = Number(process.argv[2] ?? 1_000_000);
const small = 1_000;
const samples = Number(process.env.BENCH_SAMPLES ?? 200);
const runs = Number(process.env.BENCH_RUNS ?? 5);

const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', indexed: true },
    group: { type: 'string' },
  },
};
const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, name: { type: 'string' } },
};
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer', indexed: true } },
};
const schema = {
  objectTypes: { Item, Customer, Order },
  linkTypes: { placed: { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' } },
};

const stack = await benchStack();
const { data, dataDb, controlDb, token } = stack;
const db = new pg.Client(dataDb.url);
const cdb = new pg.Client(controlDb.url);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const post = (path: string, body: unknown) => call(data.url, 'POST', path, token, body);

async function timed(n: number, once: (i: number) => Promise<unknown>): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await once(i);
    ms.push(performance.now() - t);
  }
  return ms;
}

/** The ms psql reports (\timing) for each of `n` runs of `sql`, in one session. */
async function psqlTimes(sql: string, n: number): Promise<number[]> {
  const script = `\\timing on\n${Array.from({ length: n }, () => `${sql};`).join('\n')}\n`;
  const child = spawn('psql', [
    ...libpqArgs(new URL(dataDb.url)),
    '-X',
    '-q',
    '-o',
    '/dev/null',
    '-v',
    'ON_ERROR_STOP=1',
  ]);
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  child.stdin.end(script);
  const code = await new Promise((r) => child.on('close', r));
  if (code !== 0) throw new Error(`psql exited with ${code}`);
  return [...out.matchAll(/Time: ([0-9.]+) ms/g)].map((m) => Number(m[1]));
}

async function fill(world: string, n: number) {
  const { rows } = await db.query<{ v: number }>('SELECT max(version) AS v FROM schema_versions WHERE world_id = $1', [
    world,
  ]);
  const v = rows[0]?.v ?? 1;
  await db.query(
    `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)
     SELECT $1, 'Item', 'item-' || i, 1, nextval('data_seq'), false,
            jsonb_build_object('id', 'item-' || i, 'amount', i % 1000, 'group', 'g' || (i % 20)), $3, 'bench'
       FROM generate_series(1, $2) AS i`,
    [world, n, v],
  );
  // Customers (n / 10) with five orders each (n / 2 orders), amounts 0…199.
  const customers = Math.max(10, Math.floor(n / 10));
  await db.query(
    `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)
     SELECT $1, 'Customer', 'c-' || i, 1, nextval('data_seq'), false, jsonb_build_object('id', 'c-' || i, 'name', 'n' || i), $3, 'bench'
       FROM generate_series(1, $2) AS i`,
    [world, customers, v],
  );
  await db.query(
    `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)
     SELECT $1, 'Order', 'o-' || i, 1, nextval('data_seq'), false,
            jsonb_build_object('id', 'o-' || i, 'amount', (i::bigint * 7919) % 200 - CASE WHEN i % 50 = 0 THEN 0 ELSE 100 END), $3, 'bench'
       FROM generate_series(1, $2) AS i`,
    [world, customers * 5, v],
  );
  await db.query(
    `WITH l AS (SELECT 'c-' || (1 + (i - 1) / 5) AS f, 'o-' || i AS t, nextval('data_seq') AS seq FROM generate_series(1, $2) AS i),
     h AS (
       INSERT INTO link_history (world_id, link_type, from_pk, to_pk, seq, version, deleted, actor)
       SELECT $1, 'placed', f, t, seq, 1, false, 'bench' FROM l
     )
     INSERT INTO link_heads (world_id, link_type, from_pk, to_pk, from_type, to_type, from_one, to_one, version, seq, deleted)
     SELECT $1, 'placed', f, t, 'Customer', 'Order', false, true, 1, seq, false FROM l`,
    [world, customers * 5],
  );
  return customers;
}

try {
  await db.connect();
  await cdb.connect();
  for (const w of ['big', 'small']) {
    await stack.world(w, schema);
    await until(
      `${w} in data`,
      async () => ((await db.query('SELECT 1 FROM worlds WHERE id = $1', [w])).rowCount ?? 0) > 0,
      60_000,
      5,
    );
    await cdb.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [w]);
  }
  const t = performance.now();
  const customers = await fill('big', big);
  await fill('small', small);
  await until(
    'the indexes',
    async () => (await db.query(`SELECT 1 FROM storage_indexes WHERE state <> 'ready'`)).rowCount === 0,
    1_800_000,
    200,
  );
  await db.query('VACUUM ANALYZE object_heads');
  await db.query('VACUUM ANALYZE link_heads');
  // History holds the links too (written here by SQL, with no time for autovacuum to see them).
  await db.query('VACUUM ANALYZE link_history');
  console.log(
    `setup: ${fmt(big)} + ${fmt(small)} items, ${fmt(customers)} customers in ${fmt((performance.now() - t) / 1000, 1)} s`,
  );

  // --- aggregation against psql's GROUP BY over the heads table
  const aggBody = {
    groupBy: [{ property: 'group', type: 'exact' }],
    metrics: [
      { name: 'n', op: 'count' },
      { name: 'total', op: 'sum', property: 'amount' },
    ],
  };
  const groups = (await post('/v1/worlds/big/objects/Item/aggregate', aggBody)).groups;
  if (groups.length !== 20 || groups.reduce((s: number, g: { metrics: { n: number } }) => s + g.metrics.n, 0) !== big) {
    throw new Error(`the aggregation answered ${JSON.stringify(groups).slice(0, 200)}`);
  }
  const apiAgg = median(await timed(runs, () => post('/v1/worlds/big/objects/Item/aggregate', aggBody)));
  const psqlAgg = median(
    await psqlTimes(
      `SELECT properties -> 'group', count(*), sum((properties -> 'amount')::numeric) FROM object_heads WHERE world_id = 'big' AND type = 'Item' AND NOT deleted GROUP BY 1`,
      runs,
    ),
  );
  console.log(
    `aggregation (count, sum by a 20-value property) over ${fmt(big)} objects: endpoint ${fmt(apiAgg, 1)} ms, psql ${fmt(psqlAgg, 1)} ms: ratio ${(psqlAgg / apiAgg).toFixed(2)} (psql ÷ endpoint, goal ≥ 0.8)`,
  );

  // --- filtered query on an indexed property: p99 at big ÷ at small
  const q = (w: string, i: number) =>
    post(`/v1/worlds/${w}/objects/Item/query`, { where: { amount: { $eq: i % 1000 } }, pageSize: 100 });
  for (const w of ['big', 'small']) await timed(30, (i) => q(w, i));
  const p99 = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      99,
    );
  const qBig = p99(await timed(samples, (i) => q('big', i)));
  const qSmall = p99(await timed(samples, (i) => q('small', i)));
  console.log(
    `filtered query on an indexed property (100 a page): p99 at ${fmt(big)} ${fmt(qBig, 2)} ms, at ${fmt(small)} ${fmt(qSmall, 2)} ms: ratio ${(qBig / qSmall).toFixed(2)} (goal ≤ 1.5)`,
  );

  // --- link predicate against the SQL join
  const linked = async () => {
    let token2: string | null = null;
    let n = 0;
    do {
      const page = await post('/v1/worlds/big/objects/Customer/query', {
        where: { $link: { type: 'placed', where: { amount: { $gt: 100 } } } },
        pageSize: 1000,
        ...(token2 && { pageToken: token2 }),
      });
      n += page.objects.length;
      token2 = page.nextPageToken;
    } while (token2);
    return n;
  };
  const joinSql = `SELECT c.pk, c.version, c.properties FROM object_heads c
     WHERE c.world_id = 'big' AND c.type = 'Customer' AND NOT c.deleted AND EXISTS (
       SELECT 1 FROM link_heads l JOIN object_heads o ON o.world_id = l.world_id AND o.type = 'Order' AND o.pk = l.to_pk AND NOT o.deleted
        WHERE l.world_id = 'big' AND l.link_type = 'placed' AND l.from_pk = c.pk AND NOT l.deleted
          AND (o.properties -> 'amount') > '100'::jsonb)
     ORDER BY c.pk`;
  const expected = (await db.query(joinSql)).rowCount;
  const got = await linked();
  if (got !== expected) throw new Error(`the link-predicate query found ${got} customers, the join ${expected}`);
  const apiLink = median(await timed(runs, linked));
  const psqlLink = median(await psqlTimes(joinSql.replaceAll('\n', ' '), runs));
  console.log(
    `link predicate (customers with an order over 100: ${fmt(got ?? 0)} of ${fmt(customers)}): endpoint ${fmt(apiLink, 1)} ms, SQL join ${fmt(psqlLink, 1)} ms: ratio ${(psqlLink / apiLink).toFixed(2)} (join ÷ endpoint, goal ≥ 0.5)`,
  );
} finally {
  await db.end().catch(() => {});
  await cdb.end().catch(() => {});
  await stack.close();
}

/**
 * Worlds as branches in data (issue 16, ADR 23), each pair side by side in one run:
 * - fork of a world of N objects (default 1,000,000) against a fork of a 1,000-object world: time
 *   from POST /v1/worlds {from} to the fork recorded in data (goal ≤ 2×);
 * - a single-object GET and a 100-row filtered list in a depth-3 fork of the big world against the
 *   big world itself (goal ≤ 1.5×);
 * - a GET and a list at a commit 100,000 writes old against the same at the head (goal ≤ 2×);
 * - a diff of 1,000 changes in the big world against the same in the small one (goal ≤ 2×).
 *
 * The worlds' objects are inserted by SQL (heads as data writes them), and the 100,000 later
 * writes by one SQL statement that supersedes heads the way data's writes do (history row with
 * superseded_seq, new seq): setup, not what is measured. Without intelligence, control is told
 * the worlds are READY once data has them.
 *
 *   ./onto bench data-branches [objects]      (default 1000000)
 */
import pg from 'pg';
import { fmt, until } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const big = Number(process.argv[2] ?? 1_000_000);
const small = 1_000;
const samples = Number(process.env.BENCH_SAMPLES ?? 300);
const stack = await benchStack();
const { control, data, dataDb, controlDb, token } = stack;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const ratio = (a: number, b: number) => (a / b).toFixed(2);

const db = new pg.Client(dataDb.url);
const cdb = new pg.Client(controlDb.url);

/** Median ms of `n` sequential calls of `once`. */
async function timed(n: number, once: (i: number) => Promise<unknown>): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await once(i);
    ms.push(performance.now() - t);
  }
  return median(ms);
}

const get = (path: string) => call(data.url, 'GET', path, token);

async function ready(world: string) {
  await until(
    `${world} in data`,
    async () => ((await db.query('SELECT 1 FROM worlds WHERE id = $1', [world])).rowCount ?? 0) > 0,
    60_000,
    5,
  );
  await cdb.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [world]);
}

/** Forks `from` as `id` through control; returns the ms until data recorded the fork. */
async function fork(id: string, from: string): Promise<number> {
  const t = performance.now();
  await call(control.url, 'POST', '/v1/worlds', token, { id, from: { world: from } });
  await until(
    `fork ${id} in data`,
    async () => ((await db.query('SELECT 1 FROM worlds WHERE id = $1', [id])).rowCount ?? 0) > 0,
    60_000,
    2,
  );
  const ms = performance.now() - t;
  await cdb.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [id]);
  await until(
    `schema of ${id} in data`,
    async () =>
      (await fetch(`${data.url}/v1/worlds/${id}/schema-version`, { headers: { authorization: `Bearer ${token}` } })).ok,
    60_000,
    5,
  );
  return ms;
}

async function fill(world: string, n: number) {
  const { rows } = await db.query<{ v: number }>('SELECT max(version) AS v FROM schema_versions WHERE world_id = $1', [
    world,
  ]);
  await db.query(
    `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)
     SELECT $1, 'Item', 'item-' || i, 1, nextval('data_seq'), false,
            jsonb_build_object('id', 'item-' || i, 'name', 'item ' || i, 'amount', i % 1000, 'status', CASE WHEN i % 2 = 0 THEN 'open' ELSE 'closed' END),
            $3, 'bench'
       FROM generate_series(1, $2) AS i`,
    [world, n, rows[0]?.v ?? 1],
  );
}

try {
  await db.connect();
  await cdb.connect();
  for (const w of ['big', 'small']) {
    await stack.world(w, { objectTypes: { Item } });
    await ready(w);
  }
  let t = performance.now();
  await fill('big', big);
  await fill('small', small);
  await until(
    'amount index',
    async () => (await db.query(`SELECT 1 FROM storage_indexes WHERE state = 'ready'`)).rowCount === 1,
    600_000,
    200,
  );
  await db.query('ANALYZE object_heads');
  console.log(`setup: ${fmt(big)} + ${fmt(small)} objects in ${fmt((performance.now() - t) / 1000, 1)} s`);

  // --- fork time
  const forkBig: number[] = [];
  const forkSmall: number[] = [];
  for (let i = 0; i < 5; i++) {
    forkSmall.push(await fork(`fs-${i}`, 'small'));
    forkBig.push(await fork(`fb-${i}`, 'big'));
  }
  console.log(
    `fork to provisioned in data: ${fmt(big)} objects ${fmt(median(forkBig), 1)} ms, ${fmt(small)} objects ${fmt(median(forkSmall), 1)} ms: ratio ${ratio(median(forkBig), median(forkSmall))} (goal ≤ 2)`,
  );

  // --- depth-3 fork reads
  await fork('d1', 'big');
  await call(data.url, 'PUT', '/v1/worlds/d1/objects/Item/item-1', token, { properties: { id: 'item-1', amount: 7 } });
  await fork('d2', 'd1');
  await call(data.url, 'PUT', '/v1/worlds/d2/objects/Item/item-2', token, { properties: { id: 'item-2', amount: 7 } });
  await fork('d3', 'd2');
  await call(data.url, 'PUT', '/v1/worlds/d3/objects/Item/item-3', token, { properties: { id: 'item-3', amount: 7 } });
  const pk = (i: number) => `item-${1 + ((i * 7919) % big)}`;
  const list = (w: string, extra = '') => get(`/v1/worlds/${w}/objects/Item?filter=amount:eq:7&limit=100${extra}`);
  for (const w of ['big', 'd3']) await timed(50, (i) => get(`/v1/worlds/${w}/objects/Item/${pk(i)}`)); // warm-up
  const getBig = await timed(samples, (i) => get(`/v1/worlds/big/objects/Item/${pk(i)}`));
  const getFork = await timed(samples, (i) => get(`/v1/worlds/d3/objects/Item/${pk(i)}`));
  const listBig = await timed(samples / 3, () => list('big'));
  const listFork = await timed(samples / 3, () => list('d3'));
  console.log(
    `GET one object: depth-3 fork ${fmt(getFork, 2)} ms, unforked ${fmt(getBig, 2)} ms: ratio ${ratio(getFork, getBig)} (goal ≤ 1.5)`,
  );
  console.log(
    `100-row filtered list: depth-3 fork ${fmt(listFork, 2)} ms, unforked ${fmt(listBig, 2)} ms: ratio ${ratio(listFork, listBig)} (goal ≤ 1.5)`,
  );

  // --- a read at a commit 100,000 writes old
  const old = Number((await db.query<{ c: string }>('SELECT last_value AS c FROM data_seq')).rows[0]?.c);
  t = performance.now();
  await db.query(
    `WITH u AS (SELECT pk, nextval('data_seq') AS seq FROM object_heads WHERE world_id = 'big' AND type = 'Item' ORDER BY pk LIMIT 100000),
     kept AS (
       INSERT INTO object_history (world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id, written_at, superseded_seq)
       SELECT o.world_id, o.type, o.pk, o.seq, o.version, o.deleted, o.properties, o.schema_version, o.actor, o.request_id, o.updated_at, u.seq
         FROM object_heads o JOIN u ON o.world_id = 'big' AND o.type = 'Item' AND o.pk = u.pk
     )
     UPDATE object_heads o SET version = o.version + 1, seq = u.seq, properties = o.properties || '{"name": "changed"}', updated_at = now()
       FROM u WHERE o.world_id = 'big' AND o.type = 'Item' AND o.pk = u.pk`,
  );
  await db.query('ANALYZE object_heads, object_history');
  console.log(`100,000 writes after commit ${old} in ${fmt((performance.now() - t) / 1000, 1)} s`);
  const changed = (
    await db.query<{ pk: string }>(`SELECT pk FROM object_history WHERE world_id = 'big' ORDER BY pk LIMIT 1000`)
  ).rows.map((r) => r.pk);
  const getHead = await timed(samples, (i) => get(`/v1/worlds/big/objects/Item/${changed[i % changed.length]}`));
  const getOld = await timed(samples, (i) =>
    get(`/v1/worlds/big/objects/Item/${changed[i % changed.length]}?at=${old}`),
  );
  const listHead = await timed(samples / 3, () => list('big'));
  const listOld = await timed(samples / 3, () => list('big', `&at=${old}`));
  console.log(
    `GET one object: at a commit 100,000 writes old ${fmt(getOld, 2)} ms, at the head ${fmt(getHead, 2)} ms: ratio ${ratio(getOld, getHead)} (goal ≤ 2)`,
  );
  console.log(
    `100-row filtered list: at that commit ${fmt(listOld, 2)} ms, at the head ${fmt(listHead, 2)} ms: ratio ${ratio(listOld, listHead)} (goal ≤ 2)`,
  );

  // --- a diff of 1,000 changes
  const diffOf = async (w: string) => {
    const from = Number((await db.query<{ c: string }>('SELECT last_value AS c FROM data_seq')).rows[0]?.c);
    const body = Array.from({ length: 1000 }, (_, i) =>
      JSON.stringify({ properties: { id: `item-${i * 3 + 1}`, amount: -i } }),
    ).join('\n');
    const res = await fetch(`${data.url}/v1/worlds/${w}/bulk/Item`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson' },
      body: `${body}\n`,
    });
    if (!res.ok) throw new Error(`bulk ${w}: ${res.status} ${await res.text()}`);
    let count = 0;
    const ms = await timed(10, async () => {
      const page = await get(`/v1/worlds/${w}/diff?from=${from}&limit=1000`);
      count = page.objects.length;
    });
    if (count !== 1000) throw new Error(`the diff of ${w} has ${count} objects, not 1000`);
    return ms;
  };
  const diffSmall = await diffOf('small');
  const diffBig = await diffOf('big');
  console.log(
    `diff of 1,000 changes: in ${fmt(big)} objects ${fmt(diffBig, 1)} ms, in ${fmt(small)} objects ${fmt(diffSmall, 1)} ms: ratio ${ratio(diffBig, diffSmall)} (goal ≤ 2)`,
  );
} finally {
  await db.end().catch(() => {});
  await cdb.end().catch(() => {});
  await stack.close();
}

/**
 * data's part of merges (issue 17, ADR 38), side by side in one run:
 * (a) a merge of 1,000 changed objects into a target of N objects (default 1,000,000) against the
 *     same merge into a 1,000-object target: plan + apply (goal ≤ 2×);
 * (b) a merge of 100,000 changed objects (plan + apply, objects/s) against the bulk ingest of the
 *     same 100,000 objects (goal ≥ 0.5×).
 *
 * The targets' objects are inserted by SQL (heads as data writes them): setup. The sources are
 * forks whose changes are written by data's bulk endpoint — in (b) that bulk request is the
 * ingest measured. The merge's plan and apply run data's own functions (merges/plan.ts,
 * merges/apply.ts) in a transaction on data's database, as the inbox consumer runs them, so the
 * time is data's work and not the relays' and consumers' latencies; their replies and change
 * events go to data's outbox as in the service.
 *
 *   ./onto bench merge [objects]      (default 1000000)
 */

import { applyMerge, cutCommit, planMerge } from '@onto/data/merges';
import { uuidv7 } from '@onto/shared';
import pg from 'pg';
import { fmt, until } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const big = Number(process.argv[2] ?? 1_000_000);
const small = 1_000;
const many = 100_000;
const stack = await benchStack();
const { control, data, dataDb, controlDb, token, topics } = stack;
const ratio = (a: number, b: number) => (a / b).toFixed(2);
const pool = new pg.Pool({ connectionString: dataDb.url, max: 4 });
const cdb = new pg.Client(controlDb.url);

async function fill(world: string, n: number) {
  const { rows } = await pool.query<{ v: number }>(
    'SELECT max(version) AS v FROM schema_versions WHERE world_id = $1',
    [world],
  );
  await pool.query(
    `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)
     SELECT $1, 'Item', 'item-' || i, 1, nextval('data_seq'), false,
            jsonb_build_object('id', 'item-' || i, 'name', 'item ' || i, 'amount', i % 1000, 'status', 'open'),
            $3, 'bench'
       FROM generate_series(1, $2) AS i`,
    [world, n, rows[0]?.v ?? 1],
  );
}

async function ready(world: string) {
  await until(
    `${world} in data`,
    async () => ((await pool.query('SELECT 1 FROM worlds WHERE id = $1', [world])).rowCount ?? 0) > 0,
    60_000,
    5,
  );
  await cdb.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [world]);
}

/** Forks `from` as `id` through control; answers the fork point data recorded. */
async function fork(id: string, from: string): Promise<number> {
  await call(control.url, 'POST', '/v1/worlds', token, { id, from: { world: from } });
  await until(
    `fork ${id} in data`,
    async () =>
      ((
        await pool.query(
          `SELECT 1 FROM worlds w WHERE id = $1 AND EXISTS (SELECT 1 FROM schema_versions v WHERE v.world_id = w.id)`,
          [id],
        )
      ).rowCount ?? 0) > 0,
    60_000,
    5,
  );
  const seq = Number((await pool.query('SELECT base_seq FROM worlds WHERE id = $1', [id])).rows[0].base_seq);
  await cdb.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [id]);
  return seq;
}

/** `count` objects of the source changed by one bulk request; answers its milliseconds. */
async function change(world: string, count: number, stride: number, round = 0): Promise<number> {
  const body = Array.from({ length: count }, (_, i) =>
    JSON.stringify({
      properties: { id: `item-${1 + i * stride}`, name: `changed ${round}.${i}`, amount: i % 1000, status: 'closed' },
    }),
  ).join('\n');
  const t = performance.now();
  const summary = await call(data.url, 'POST', `/v1/worlds/${world}/bulk/Item`, token, `${body}\n`, {
    'content-type': 'application/x-ndjson',
  });
  const ms = performance.now() - t;
  if (summary.updated !== count) throw new Error(`bulk into ${world} updated ${summary.updated}, not ${count}`);
  return ms;
}

/** Plans and applies source → target (SOURCE_WINS) as the inbox consumer does; answers both times. */
async function merge(source: string, target: string, forkSeq: number, expected: number) {
  const { rows } = await pool.query<{ document: Record<string, unknown>; version: number }>(
    'SELECT document, version FROM schema_versions WHERE world_id = $1 ORDER BY version DESC LIMIT 1',
    [target],
  );
  const schema = rows[0] as { document: Record<string, unknown>; version: number };
  const id = uuidv7();
  const inTx = async (work: (tx: pg.PoolClient) => Promise<void>) => {
    const tx = await pool.connect();
    try {
      await tx.query('BEGIN');
      await work(tx);
      await tx.query('COMMIT');
    } catch (error) {
      await tx.query('ROLLBACK');
      throw error;
    } finally {
      tx.release();
    }
  };
  let t = performance.now();
  await inTx((tx) =>
    planMerge(
      tx,
      topics.prefix,
      uuidv7(),
      {
        merge: id,
        source,
        target,
        strategy: 'SOURCE_WINS',
        dryRun: false,
        base: { world: target, schemaVersion: schema.version, dataSeq: forkSeq, definitions: 0 },
        schema: schema.document,
        actor: 'bench',
      },
      () => cutCommit(pool),
    ),
  );
  const planMs = performance.now() - t;
  t = performance.now();
  await inTx((tx) =>
    applyMerge(tx, topics.prefix, uuidv7(), { merge: id, schemaVersion: schema.version, schema: schema.document }),
  );
  const applyMs = performance.now() - t;
  const { rows: done } = await pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM merge_items WHERE merge_id = $1 AND written_seq IS NOT NULL',
    [id],
  );
  if (done[0]?.n !== expected) throw new Error(`merge ${source} → ${target} wrote ${done[0]?.n}, not ${expected}`);
  return { planMs, applyMs, ms: planMs + applyMs };
}

try {
  await cdb.connect();
  for (const w of ['big', 'small', 'hundred']) {
    await stack.world(w, { objectTypes: { Item } });
    await ready(w);
  }
  const t = performance.now();
  await fill('big', big);
  await fill('small', small);
  await fill('hundred', many);
  await pool.query('ANALYZE object_heads');
  console.log(
    `setup: ${fmt(big)} + ${fmt(small)} + ${fmt(many)} objects in ${fmt((performance.now() - t) / 1000, 1)} s`,
  );

  // --- (a) 1,000 changes into a big target against a 1,000-object one
  const runs: { big: number; small: number }[] = [];
  for (let round = 0; round < 3; round++) {
    const row = { big: 0, small: 0 };
    for (const [target, size] of [
      ['small', small],
      ['big', big],
    ] as const) {
      const source = `${target}-src-${round}`;
      const forkSeq = await fork(source, target);
      await change(source, 1000, Math.max(1, Math.floor(size / 1000)), round);
      const m = await merge(source, target, forkSeq, 1000);
      row[target] = m.ms;
      console.log(
        `(a) round ${round}: 1,000 changes into ${fmt(size)} objects: plan ${fmt(m.planMs, 1)} ms + apply ${fmt(m.applyMs, 1)} ms`,
      );
    }
    runs.push(row);
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const aBig = med(runs.map((r) => r.big));
  const aSmall = med(runs.map((r) => r.small));
  console.log(
    `(a) merge of 1,000 changed objects: into ${fmt(big)} objects ${fmt(aBig, 1)} ms, into ${fmt(small)} objects ${fmt(aSmall, 1)} ms: ratio ${ratio(aBig, aSmall)} (goal ≤ 2)`,
  );

  // --- (b) 100,000 changed objects merged against their bulk ingest
  const forkSeq = await fork('hundred-src', 'hundred');
  const ingestMs = await change('hundred-src', many, 1);
  const m = await merge('hundred-src', 'hundred', forkSeq, many);
  const ingestRate = many / (ingestMs / 1000);
  const mergeRate = many / (m.ms / 1000);
  console.log(
    `(b) 100,000 objects: bulk ingest ${fmt(ingestMs)} ms (${fmt(ingestRate)}/s); merge plan ${fmt(m.planMs)} ms + apply ${fmt(m.applyMs)} ms (${fmt(mergeRate)}/s): ratio ${ratio(mergeRate, ingestRate)} (goal ≥ 0.5)`,
  );
} finally {
  await pool.end().catch(() => {});
  await cdb.end().catch(() => {});
  await stack.close();
}

/**
 * History retention (docs/adr/0072): pruning `rows` history rows of a world while single PUTs run
 * against it. The history is written straight into data's tables (versions of `rows / 100` keys,
 * ten days old), then the same autocannon load of single-object PUTs runs twice for `seconds`:
 * without pruning, then right after a policy of one day is set, while data's recurring job prunes
 * every one of those rows. Reports PUT p99 during pruning ÷ without (goal ≤ 1.5) and the rows
 * pruned per second.
 *
 *   ./onto bench retention-prune [rows] [seconds]    (default 10,000,000 and 20)
 */
import autocannon from 'autocannon';
import pg from 'pg';
import { fmt, report, until } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const rows = Number(process.argv[2] ?? 10_000_000);
const seconds = Number(process.argv[3] ?? 20);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 8);
const warmup = Number(process.env.BENCH_WARMUP ?? 3);
const batch = process.env.BENCH_PRUNE_BATCH ?? '5000';
const versionsPerKey = 101;
const keys = Math.max(1, Math.ceil(rows / (versionsPerKey - 1)));
const history = keys * (versionsPerKey - 1);

const stack = await benchStack({
  dataEnv: {
    RETENTION_PRUNE_INTERVAL_MS: '1000',
    RETENTION_PRUNE_BATCH: batch,
    RETENTION_PRUNE_GRACE_MS: '0',
  },
});
const { control, data, dataDb, token } = stack;
const db = new pg.Client(dataDb.url);
await db.connect();

try {
  await stack.world('bench', { objectTypes: { Item } });
  const { rows: sv } = await db.query<{ v: number }>(
    `SELECT max(version) AS v FROM schema_versions WHERE world_id = 'bench'`,
  );
  const schemaVersion = sv[0]?.v ?? 1;
  // The index of Item.amount is built concurrently: it waits for every transaction, ANALYZE too.
  await until(
    'the indexes built',
    async () => (await db.query(`SELECT 1 FROM storage_indexes WHERE state <> 'ready'`)).rowCount === 0,
    600_000,
    200,
  );

  // --- the history: key i's version v (1 ≤ v < 101) at seq base + v·keys + i, superseded by the
  // next; the head at version 101. All written ten days ago, in one reserved range of data_seq.
  const t0 = Date.now();
  const { rows: reserved } = await db.query<{ base: string }>(
    `SELECT nextval('data_seq') AS base, setval('data_seq', currval('data_seq') + $1::bigint + 1)`,
    [(versionsPerKey + 1) * keys],
  );
  const base = Number(reserved[0]?.base);
  const chunk = Math.max(1, Math.floor(1_000_000 / (versionsPerKey - 1)));
  for (let from = 0; from < keys; from += chunk) {
    const to = Math.min(keys, from + chunk) - 1;
    await db.query(
      `INSERT INTO object_history (world_id, type, pk, seq, version, deleted, properties, schema_version, actor,
                                   written_at, superseded_seq)
       SELECT 'bench', 'Item', 'old-' || i, $1::bigint + v * $2::bigint + i, v, false,
              jsonb_build_object('id', 'old-' || i, 'amount', v), $3, 'bench', now() - interval '10 days',
              $1::bigint + (v + 1) * $2::bigint + i
         FROM generate_series($4::int, $5::int) i, generate_series(1, $6::int - 1) v`,
      [base, keys, schemaVersion, from, to, versionsPerKey],
    );
    await db.query(
      `INSERT INTO object_heads (world_id, type, pk, version, seq, properties, schema_version, actor, created_at, updated_at)
       SELECT 'bench', 'Item', 'old-' || i, $6::int, $1::bigint + $6::bigint * $2::bigint + i,
              jsonb_build_object('id', 'old-' || i, 'amount', $6::int), $3, 'bench',
              now() - interval '10 days', now() - interval '10 days'
         FROM generate_series($4::int, $5::int) i`,
      [base, keys, schemaVersion, from, to, versionsPerKey],
    );
  }
  await db.query('ANALYZE object_history; ANALYZE object_heads');
  console.log(`${fmt(history)} history rows of ${fmt(keys)} keys written in ${fmt((Date.now() - t0) / 1000, 1)} s`);

  // --- single PUTs, of keys of their own
  let n = 0;
  const load = (duration = seconds) =>
    autocannon({
      url: data.url,
      connections,
      duration,
      requests: [
        {
          method: 'PUT',
          setupRequest: (req) => {
            n++;
            const pk = `live-${n % 10_000}`;
            return {
              ...req,
              path: `/v1/worlds/bench/objects/Item/${pk}`,
              headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
              body: JSON.stringify({ properties: { id: pk, amount: n, status: 'open' } }),
            };
          },
        },
      ],
    });
  await load(warmup); // warm-up, not counted
  const quiet = await load();

  // --- the same load while pruning: a policy of one day makes every old row prunable
  const pruned = async () =>
    Number(
      (
        await db.query<{ n: string }>(
          `SELECT coalesce(max(pruned), 0) AS n FROM world_retention WHERE world_id = 'bench'`,
        )
      ).rows[0]?.n,
    );
  await call(control.url, 'PUT', '/v1/worlds/bench/retention', token, { keepDays: 1 });
  await until(
    'the policy in data',
    async () => (await db.query(`SELECT 1 FROM world_retention WHERE world_id = 'bench'`)).rowCount === 1,
    60_000,
  );
  const start = Date.now();
  // The pruning's end is watched while the load runs: rows per second are the pruner's own.
  let prunedDuringLoad = 0;
  const [busy, pruneSeconds] = await Promise.all([
    load().then(async (r) => {
      prunedDuringLoad = await pruned();
      return r;
    }),
    until('every old row pruned', async () => (await pruned()) >= history, 24 * 3_600_000, 200).then(
      () => (Date.now() - start) / 1000,
    ),
  ]);
  const { rows: left } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM object_history WHERE world_id = 'bench' AND pk LIKE 'old-%'`,
  );
  if (Number(left[0]?.n) !== 0) throw new Error(`${left[0]?.n} old history rows left after pruning`);

  const ratio = busy.latency.p99 / Math.max(1, quiet.latency.p99);
  console.log('');
  console.log(`| ${connections} connections, ${seconds} s | PUT/s | p50 ms | p99 ms | non-2xx |`);
  console.log('|---|---:|---:|---:|---:|');
  for (const [what, r] of [
    ['without pruning', quiet],
    [`while pruning (${fmt(prunedDuringLoad)} rows pruned meanwhile)`, busy],
  ] as const) {
    console.log(`| ${what} | ${fmt(r.requests.average)} | ${r.latency.p50} | ${r.latency.p99} | ${fmt(r.non2xx)} |`);
  }
  const rate = history / pruneSeconds;
  console.log(`${fmt(history)} rows pruned in ${fmt(pruneSeconds, 1)} s: ${fmt(rate)} rows/s (batches of ${batch})`);
  console.log(`PUT p99 while pruning ÷ without: ${ratio.toFixed(2)} (goal ≤ 1.5)`);
  report('retention-prune', { 'PUT p99 pruning ÷ without': ratio, 'rows pruned/s': rate });
} finally {
  await db.end();
  await stack.close();
}

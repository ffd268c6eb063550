/**
 * A single-object PUT through data's REST API (autocannon, 64 connections, 10 s, each request a
 * real change of one of 100,000 objects) beside pgbench running the transaction at its core —
 * the object row and its outbox row — with the same concurrency, on the same server. Goal ≥ 0.7.
 *
 *   ./onto bench data-put [seconds]      (default 10; needs `pnpm run build`, which ./onto does)
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { fmt, libpqArgs, report } from './lib/harness.js';
import { benchStack, Item } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 10);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 64);
const objects = 100_000;
const warmup = Number(process.env.BENCH_WARMUP ?? 3);
const stack = await benchStack({
  dataEnv: { DB_POOL_MAX: '32' },
});
const { data, dataDb, token } = stack;

/** Versions (history and heads) and change events stored so far in the bench world. */
async function versions() {
  const check = new pg.Client(dataDb.url);
  await check.connect();
  try {
    const { rows } = await check.query<{ history: number; events: number }>(
      `SELECT (SELECT count(*)::int FROM object_versions WHERE world_id = 'bench') AS history,
              (SELECT count(*)::int FROM outbox WHERE topic LIKE '%changes.objects') AS events`,
    );
    return { history: rows[0]?.history ?? 0, events: rows[0]?.events ?? 0 };
  } finally {
    await check.end();
  }
}

try {
  await stack.world('bench', { objectTypes: { Item } });

  // --- REST: every request a change (the amount is new each time), of a random object
  let n = 0;
  const load = (duration: number) =>
    autocannon({
      url: data.url,
      connections,
      duration,
      requests: [
        {
          method: 'PUT',
          setupRequest: (req) => {
            n++;
            const pk = `item-${Math.floor(Math.random() * objects)}`;
            return {
              ...req,
              path: `/v1/worlds/bench/objects/Item/${pk}`,
              headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
              body: JSON.stringify({ properties: { id: pk, name: `item ${pk}`, amount: n, status: 'open' } }),
            };
          },
        },
      ],
    });
  // Warm-up, not counted: JIT, the pool's connections and their caches. Without it a 10 s run
  // spent its first seconds at a fraction of its steady rate (0.55 of pgbench against 0.77 for
  // 20 s on the same VM). pgbench gets the same warm-up below.
  await load(warmup);
  const before = await versions();
  const rest = await load(seconds);
  const ok = rest['2xx'];
  const restRate = ok / seconds;
  // Every answered PUT was a change: one version (history or head) and one change event each.
  // Up to one more per connection may land from each phase's requests in flight when autocannon
  // stopped counting: the warm-up's after `before`, the run's before `after`.
  const after = await versions();
  const written = after.history - before.history;
  if (written < ok || written > ok + 2 * connections || after.events - before.events !== written) {
    throw new Error(
      `${ok} PUTs answered 2xx, but ${written} versions and ${after.events - before.events} change events stored`,
    );
  }
  // The services go before pgbench: its 64 connections need the server's connection slots.
  await stack.stopServices();

  // --- pgbench: the same object row + outbox row, one transaction, same concurrency
  const dir = mkdtempSync(join(tmpdir(), 'onto-pgbench-'));
  const client = new pg.Client(dataDb.url);
  await client.connect();
  await client.query(
    `CREATE TABLE bench_objects (pk text PRIMARY KEY, version int NOT NULL, properties jsonb NOT NULL)`,
  );
  await client.end();
  const body = JSON.stringify({ after: { id: 'item', name: 'item x', amount: 1, status: 'open' } }).padEnd(600, ' ');
  writeFileSync(
    join(dir, 'put.sql'),
    `\\set pk random(1, ${objects})
\\set amount random(1, 1000000)
BEGIN;
INSERT INTO bench_objects (pk, version, properties)
  VALUES ('item-' || :pk, 1, jsonb_build_object('id', 'item-' || :pk, 'name', 'item', 'amount', :amount, 'status', 'open'))
  ON CONFLICT (pk) DO UPDATE SET version = bench_objects.version + 1, properties = EXCLUDED.properties;
WITH o AS (
  INSERT INTO outbox (event_id, topic, partition_key, lane, body)
  VALUES (gen_random_uuid(), 'bench', 'bench/Item/item-' || :pk, :pk % 64, '${body}')
  RETURNING id, lane)
INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM o;
COMMIT;
`,
  );
  const url = new URL(dataDb.url);
  const pgbench = (duration: number) => {
    const run = spawnSync(
      'pgbench',
      [
        '-n',
        '-c',
        String(connections),
        '-j',
        '2',
        '-T',
        String(duration),
        '-f',
        join(dir, 'put.sql'),
        ...libpqArgs(url),
      ],
      { encoding: 'utf8' },
    );
    const tps = Number(run.stdout.match(/tps = ([\d.]+) \(without initial connection time\)/)?.[1]);
    if (!Number.isFinite(tps)) throw new Error(`pgbench: ${run.stdout}${run.stderr}`);
    return tps;
  };
  pgbench(warmup);
  const tps = pgbench(seconds);

  console.log('');
  console.log(`| ${connections} connections, ${seconds} s | writes/s | p50 ms | p99 ms |`);
  console.log('|---|---:|---:|---:|');
  console.log(
    `| PUT /v1/worlds/…/objects/Item/{pk} (autocannon; ${fmt(rest.non2xx)} non-2xx) | ${fmt(restRate)} | ${rest.latency.p50} | ${rest.latency.p99} |`,
  );
  console.log(`| pgbench: object row + outbox row | ${fmt(tps)} | | |`);
  console.log(`ratio ${(restRate / tps).toFixed(2)} (goal ≥ 0.7)`);
  report('data-put', { 'PUT ÷ pgbench': restRate / tps, 'PUT p99 ms': rest.latency.p99 });
} finally {
  await stack.close();
}

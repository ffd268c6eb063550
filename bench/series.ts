/**
 * Time series (docs/adr/0028), side by side in one run, on the same server and the same table:
 *
 * 1. Ingest: points through data's streamed bulk endpoint (NDJSON, checked, written 5,000 at a
 *    time by an idempotent upsert, one series.points.written event per series and batch) against
 *    psql's \copy of the same number of points into series_points. Goal ≥ 0.5.
 * 2. Rollup: a 1-hour-bucket avg over one series of R points through GET …?bucket=1h&agg=avg
 *    against the same GROUP BY written by hand in psql. Goal ≥ 0.8.
 *
 *   ./onto bench series [points] [rollupPoints] [rounds]   (default 200000, 10000000, 3)
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { fmt, libpqArgs, until } from './lib/harness.js';
import { benchStack, call } from './lib/stack.js';

const points = Number(process.argv[2] ?? 200_000);
const rollupPoints = Number(process.argv[3] ?? 10_000_000);
const rounds = Number(process.argv[4] ?? 3);
const OBJECTS = 100;
const Sensor = {
  displayName: 'Sensor',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, temperature: { type: { type: 'series', value: 'double' } } },
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

const stack = await benchStack();
const { control, controlDb, data, dataDb, token } = stack;
try {
  await stack.world('bench', { objectTypes: { Sensor } });
  const db = new pg.Client(dataDb.url);
  await db.connect();
  const url = new URL(dataDb.url);
  const dir = mkdtempSync(join(tmpdir(), 'onto-series-'));
  /** psql running `args`; answers its wall-clock milliseconds. */
  const psql = (args: string[]) => {
    const started = performance.now();
    const run = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', ...args, ...libpqArgs(url)], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    });
    const ms = performance.now() - started;
    if (run.status !== 0) throw new Error(`psql: ${run.stderr}`);
    return { ms, out: run.stdout };
  };
  // Points of the last hours, inside the partitions made ahead: 10 ms apart per sensor.
  const start = Date.now() - Math.ceil(points / OBJECTS) * 10 - 60_000;
  const time = (round: number, i: number) => new Date(start + Math.floor(i / OBJECTS) * 10 + round).toISOString();

  // --- 1. ingest
  const bulkRates: number[] = [];
  const copyRates: number[] = [];
  // The \copy side writes to series of its own (other sensors), in the same table.
  const { rows: copyIds } = await db.query<{ id: string }>(
    `INSERT INTO series_keys (world_id, type, pk, series)
     SELECT 'bench', 'Sensor', 'copy-' || i, 'temperature' FROM generate_series(0, $1 - 1) AS i RETURNING id`,
    [OBJECTS],
  );
  for (let round = 1; round <= rounds; round++) {
    const lines: string[] = [];
    for (let i = 0; i < points; i++) {
      lines.push(
        `{"type":"Sensor","pk":"s${i % OBJECTS}","series":"temperature","time":"${time(round, i)}","value":${(i % 1000) / 10}}`,
      );
    }
    const body = `${lines.join('\n')}\n`;
    const started = performance.now();
    const summary = await call(data.url, 'POST', '/v1/worlds/bench/series', token, body, {
      'content-type': 'application/x-ndjson',
    });
    const bulkMs = performance.now() - started;
    if (summary.written !== points) throw new Error(`bulk wrote ${summary.written}, not ${points}`);
    bulkRates.push(points / (bulkMs / 1000));

    // data's relay publishes the round's events after the request: the \copy runs once it is done,
    // so that it does not share the machine with them (they are not in the bulk's time either).
    await until(
      "data's outbox drained",
      async () => Number((await db.query('SELECT count(*) AS n FROM outbox_pending')).rows[0]?.n) === 0,
      120_000,
    );
    const file = join(dir, `copy-${round}.tsv`);
    const rows: string[] = [];
    for (let i = 0; i < points; i++) {
      rows.push(`bench\t${copyIds[i % OBJECTS]?.id}\t${time(round, i)}\t0\t${(i % 1000) / 10}`);
    }
    writeFileSync(file, `${rows.join('\n')}\n`);
    const copy = psql(['-c', `\\copy series_points (world_id, series_id, time, seq, num) FROM '${file}'`]);
    copyRates.push(points / (copy.ms / 1000));
    console.log(
      `ingest round ${round}: bulk ${fmt(bulkMs)} ms (${fmt(points / (bulkMs / 1000))} points/s), \\copy ${fmt(copy.ms)} ms (${fmt(points / (copy.ms / 1000))} points/s)`,
    );
  }

  // --- 2. rollup: one series of rollupPoints points, 100 ms apart, ending now
  const stride = 100;
  const from = new Date(Date.now() - rollupPoints * stride);
  const to = new Date(from.getTime() + rollupPoints * stride);
  await call(data.url, 'POST', '/v1/worlds/bench/series/Sensor/big/temperature', token, {
    points: [{ time: from.toISOString(), value: 0 }],
  });
  const { rows: big } = await db.query<{ id: string }>(
    "SELECT id FROM series_keys WHERE world_id = 'bench' AND pk = 'big' AND series = 'temperature'",
  );
  const bigId = Number(big[0]?.id);
  const loading = performance.now();
  await db.query(
    `SELECT series_partition_ensure(d::date)
       FROM generate_series($1::timestamptz, $2::timestamptz, interval '1 day') AS d`,
    [from.toISOString(), to.toISOString()],
  );
  await db.query(
    `INSERT INTO series_points (world_id, series_id, time, seq, num)
     SELECT 'bench', $1, $2::timestamptz + i * interval '${stride} milliseconds', 0, (i % 1000) / 10.0
       FROM generate_series(1, $3 - 1) AS i`,
    [bigId, from.toISOString(), rollupPoints],
  );
  await db.query('VACUUM ANALYZE series_points');
  console.log(`loaded ${fmt(rollupPoints)} points of one series in ${fmt(performance.now() - loading)} ms`);
  const query = `?from=${from.toISOString()}&to=${new Date(to.getTime() + 1).toISOString()}&bucket=1h&agg=avg&limit=10000`;
  const handSql = `SELECT date_bin('1 hour', time, timestamptz 'epoch') AS bucket, avg(num) FROM series_points
     WHERE series_id = ${bigId} AND time >= '${from.toISOString()}' AND time < '${new Date(to.getTime() + 1).toISOString()}'
     GROUP BY 1 ORDER BY 1`;
  const apiMs: number[] = [];
  const handMs: number[] = [];
  let buckets = 0;
  for (let round = 1; round <= rounds; round++) {
    const started = performance.now();
    const answer = await call(data.url, 'GET', `/v1/worlds/bench/series/Sensor/big/temperature${query}`, token);
    apiMs.push(performance.now() - started);
    buckets = answer.points.length;
    if (answer.next !== null) throw new Error('the rollup did not fit one page');
    const hand = psql(['-A', '-t', '-c', handSql]);
    handMs.push(hand.ms);
    const handBuckets = hand.out.trim().split('\n').length;
    if (handBuckets !== buckets) throw new Error(`API answered ${buckets} buckets, psql ${handBuckets}`);
    console.log(
      `rollup round ${round}: API ${fmt(apiMs.at(-1) ?? 0)} ms, psql ${fmt(hand.ms)} ms (${buckets} buckets)`,
    );
  }
  // --- 3. the same rollup in a fork of the world (docs/adr/0030): the base's points read up the chain.
  // No intelligence here to mark the world READY in control: done by hand, as the tests do.
  const controlPg = new pg.Client(controlDb.url);
  await controlPg.connect();
  await controlPg.query(`UPDATE worlds SET status = 'READY' WHERE id = 'bench'`);
  await controlPg.end();
  await call(control.url, 'POST', '/v1/worlds', token, { id: 'bench-fork', from: { world: 'bench' } });
  await until(
    'the fork provisioned in data',
    async () =>
      (
        await db.query(
          `SELECT 1 FROM worlds w WHERE w.id = 'bench-fork' AND EXISTS (SELECT 1 FROM schema_versions v WHERE v.world_id = w.id)`,
        )
      ).rowCount === 1,
    60_000,
  );
  const forkMs: number[] = [];
  for (let round = 1; round <= rounds; round++) {
    const started = performance.now();
    const answer = await call(data.url, 'GET', `/v1/worlds/bench-fork/series/Sensor/big/temperature${query}`, token);
    forkMs.push(performance.now() - started);
    if (answer.points.length !== buckets)
      throw new Error(`the fork answered ${answer.points.length} buckets, not ${buckets}`);
    console.log(`fork rollup round ${round}: API ${fmt(forkMs.at(-1) ?? 0)} ms`);
  }
  await db.end();

  const bulk = median(bulkRates);
  const copy = median(copyRates);
  const api = median(apiMs);
  const hand = median(handMs);
  console.log('');
  console.log(`| ${fmt(points)} points over ${OBJECTS} sensors per round, ${rounds} rounds | points/s (median) |`);
  console.log('|---|---:|');
  console.log(`| POST /v1/worlds/…/series (NDJSON stream, checked, upserted, events) | ${fmt(bulk)} |`);
  console.log(`| psql \\copy into series_points | ${fmt(copy)} |`);
  console.log(`ingest ratio ${(bulk / copy).toFixed(2)} (goal ≥ 0.5)`);
  console.log('');
  console.log(`| 1-hour avg over ${fmt(rollupPoints)} points of one series (${buckets} buckets) | ms (median) |`);
  console.log('|---|---:|');
  console.log(`| GET …?bucket=1h&agg=avg | ${fmt(api)} |`);
  console.log(`| psql, the same GROUP BY by hand | ${fmt(hand)} |`);
  console.log(`rollup ratio ${(hand / api).toFixed(2)} (psql time / API time; goal ≥ 0.8)`);
  console.log(`| the same GET in a fork (base's points read up the chain) | ${fmt(median(forkMs))} |`);
  console.log(`fork rollup ratio ${(median(forkMs) / api).toFixed(2)} (fork time / unforked API time)`);
} finally {
  await stack.close();
}

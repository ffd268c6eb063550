/**
 * Bulk ingest through data's REST API (one NDJSON request of N new objects: validated, heads
 * written by COPY, one change event per object into the outbox in bundles, one transaction)
 * beside a plain `COPY` of the same rows (primary key + JSON document) into a table with a
 * primary key, by psql, on the same server, in the same run. Goal ≥ 0.5.
 *
 *   ./onto bench data-bulk [objects] [rounds]      (default 100000 objects, 3 rounds)
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { fmt } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const objects = Number(process.argv[2] ?? 100_000);
const rounds = Number(process.argv[3] ?? 3);
const stack = await benchStack();
const { data, dataDb, token } = stack;
const row = (round: number, i: number) => {
  const id = `item-${round}-${i}`;
  return { id, name: `item ${id}`, amount: i, status: i % 2 ? 'open' : 'closed' };
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

try {
  await stack.world('bench', { objectTypes: { Item } });

  const db = new pg.Client(dataDb.url);
  await db.connect();
  await db.query('CREATE TABLE bench_copy (pk text PRIMARY KEY, properties jsonb NOT NULL)');
  const dir = mkdtempSync(join(tmpdir(), 'onto-bulk-'));
  const url = new URL(dataDb.url);
  const bulkRates: number[] = [];
  const copyRates: number[] = [];
  let bytes = 0;
  for (let round = 1; round <= rounds; round++) {
    // --- REST bulk: one request, every object new
    const rows = Array.from({ length: objects }, (_, i) => row(round, i));
    const body = `${rows.map((properties) => JSON.stringify({ properties })).join('\n')}\n`;
    bytes = body.length;
    let started = performance.now();
    const summary = await call(data.url, 'POST', '/v1/worlds/bench/bulk/Item', token, body, {
      'content-type': 'application/x-ndjson',
    });
    const bulkMs = performance.now() - started;
    if (summary.created !== objects) throw new Error(`bulk created ${summary.created}, not ${objects}`);
    bulkRates.push(objects / (bulkMs / 1000));

    // --- plain COPY of the same rows (round + 100 keeps the keys apart from the bulk's)
    const file = join(dir, `copy-${round}.tsv`);
    writeFileSync(
      file,
      `${Array.from({ length: objects }, (_, i) => {
        const p = row(round + 100, i);
        return `${p.id}\t${JSON.stringify(p)}`;
      }).join('\n')}\n`,
    );
    started = performance.now();
    const copy = spawnSync(
      'psql',
      [
        '-X',
        '-q',
        '-v',
        'ON_ERROR_STOP=1',
        '-h',
        url.hostname,
        '-p',
        url.port || '5432',
        '-U',
        url.username || 'postgres',
        '-d',
        url.pathname.slice(1),
        '-c',
        `\\copy bench_copy (pk, properties) FROM '${file}'`,
      ],
      { encoding: 'utf8' },
    );
    const copyMs = performance.now() - started;
    if (copy.status !== 0) throw new Error(`psql COPY: ${copy.stderr}`);
    copyRates.push(objects / (copyMs / 1000));
    console.log(
      `round ${round}: bulk ${fmt(bulkMs)} ms (${fmt(objects / (bulkMs / 1000))}/s), COPY ${fmt(copyMs)} ms (${fmt(objects / (copyMs / 1000))}/s)`,
    );
  }
  const { rows: counted } = await db.query<{ objects: number; events: number }>(
    `SELECT (SELECT count(*)::int FROM object_heads WHERE world_id = 'bench') AS objects,
            (SELECT coalesce(sum(coalesce(bundle, 1)), 0)::int FROM outbox) AS events`,
  );
  await db.end();

  const bulk = median(bulkRates);
  const copy = median(copyRates);
  console.log('');
  console.log(
    `| ${fmt(objects)} objects per round, ${rounds} rounds (${fmt(bytes / 1e6, 1)} MB NDJSON) | objects/s (median) |`,
  );
  console.log('|---|---:|');
  console.log(
    `| POST /v1/worlds/…/bulk/Item (validated, new heads + one event each, one transaction) | ${fmt(bulk)} |`,
  );
  console.log(`| psql \\copy into (pk text PRIMARY KEY, properties jsonb) | ${fmt(copy)} |`);
  // Each object's event, bundled or not: the bundles' events counted (ADR 16).
  console.log(`stored: ${fmt(counted[0]?.objects ?? 0)} objects, ${fmt(counted[0]?.events ?? 0)} outbox events`);
  console.log(`ratio ${(bulk / copy).toFixed(2)} (goal ≥ 0.5)`);
} finally {
  await stack.close();
}

/**
 * Bulk ingest through data's REST API (one NDJSON request of N new objects: validated, heads
 * written by COPY, one change event per object into the outbox in bundles, one transaction)
 * beside a plain `COPY` of the same rows (primary key + JSON document) into a table with a
 * primary key, by psql, on the same server, in the same run. Goal ≥ 0.5.
 *
 * Each side starts on a quiet machine: after a bulk request the benchmark waits until data's relay
 * has published all its events to Kafka (reported beside it: the full cost of the write) before
 * the COPY and the next round run, so that neither side pays for the relay's work on the other's
 * turn.
 *
 *   ./onto bench data-bulk [objects] [rounds]      (default 100000 objects, 3 rounds)
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { fmt, libpqArgs } from './lib/harness.js';
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
  const publishedRates: number[] = [];
  const headsRates: number[] = [];
  /** psql's \copy of these lines from a file into `target`; answers its milliseconds. */
  const psqlCopy = (name: string, target: string, lines: string[]) => {
    const file = join(dir, name);
    writeFileSync(file, `${lines.join('\n')}\n`);
    const started = performance.now();
    const copy = spawnSync(
      'psql',
      ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-c', `\\copy ${target} FROM '${file}'`, ...libpqArgs(url)],
      { encoding: 'utf8' },
    );
    const ms = performance.now() - started;
    if (copy.status !== 0) throw new Error(`psql COPY: ${copy.stderr}`);
    return ms;
  };
  const copyRates: number[] = [];
  let bytes = 0;
  for (let round = 1; round <= rounds; round++) {
    // --- REST bulk: one request, every object new
    const rows = Array.from({ length: objects }, (_, i) => row(round, i));
    const body = `${rows.map((properties) => JSON.stringify({ properties })).join('\n')}\n`;
    bytes = body.length;
    const started = performance.now();
    const summary = await call(data.url, 'POST', '/v1/worlds/bench/bulk/Item', token, body, {
      'content-type': 'application/x-ndjson',
    });
    const bulkMs = performance.now() - started;
    if (summary.created !== objects) throw new Error(`bulk created ${summary.created}, not ${objects}`);
    bulkRates.push(objects / (bulkMs / 1000));
    // Until the relay has published every event of the request (outbox_pending empty).
    for (;;) {
      const { rows: left } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox_pending');
      if (left[0]?.n === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const publishedMs = performance.now() - started;
    publishedRates.push(objects / (publishedMs / 1000));

    // --- plain COPY of the same rows (round + 100 keeps the keys apart from the bulk's)
    const copyMs = psqlCopy(
      `copy-${round}.tsv`,
      'bench_copy (pk, properties)',
      Array.from({ length: objects }, (_, i) => {
        const p = row(round + 100, i);
        return `${p.id}\t${JSON.stringify(p)}`;
      }),
    );
    copyRates.push(objects / (copyMs / 1000));
    // --- for scale, not the goal: the same rows as heads, by psql, into object_heads with its
    // two indexes (primary key, and the indexed property's), in a world of their own.
    const headsMs = psqlCopy(
      `heads-${round}.tsv`,
      'object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)',
      Array.from({ length: objects }, (_, i) => {
        const p = row(round + 200, i);
        return `copyref\tItem\t${p.id}\t1\t${round * objects + i}\tf\t${JSON.stringify(p)}\t1\tbench`;
      }),
    );
    headsRates.push(objects / (headsMs / 1000));
    console.log(
      `round ${round}: bulk ${fmt(bulkMs)} ms (${fmt(objects / (bulkMs / 1000))}/s), all events on Kafka after ${fmt(publishedMs)} ms, COPY ${fmt(copyMs)} ms (${fmt(objects / (copyMs / 1000))}/s), COPY as heads ${fmt(headsMs)} ms`,
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
  console.log(
    `| … and every change event of the request published to Kafka by data's relay | ${fmt(median(publishedRates))} |`,
  );
  console.log(`| psql \\copy into (pk text PRIMARY KEY, properties jsonb) | ${fmt(copy)} |`);
  console.log(`| (for scale) psql \\copy of the same rows as heads into object_heads | ${fmt(median(headsRates))} |`);
  // Each object's event, bundled or not: the bundles' events counted (ADR 16).
  console.log(`stored: ${fmt(counted[0]?.objects ?? 0)} objects, ${fmt(counted[0]?.events ?? 0)} outbox events`);
  console.log(`ratio ${(bulk / copy).toFixed(2)} (goal ≥ 0.5)`);
} finally {
  await stack.close();
}

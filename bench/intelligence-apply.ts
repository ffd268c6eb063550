/**
 * intelligence's change apply path alone, in process (no Kafka, no HTTP): batches of
 * `object.updated` events through `applyChanges` — the read-model write, the recompute of one
 * derived property, the watermark — each batch in its own transaction, as the inbox consumer
 * runs it. Every event supersedes a stored version and a value, which is where ADR 33's
 * versioned rows cost most (each keeps a history row of each). Prints the median and p90 ms of a
 * batch and the events applied per second; run it at two commits for a before/after.
 *
 *   ./onto bench intelligence-apply [batches] [batchSize]      (default 200 batches of 100)
 */
import { emptySchema, newEvent, queryTogether, type ReceivedEvent, SchemaReplica } from '@onto/shared';
import { createTestDatabase, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { Registry } from 'prom-client';
import { migrations } from '../services/intelligence/src/app.js';
import { applyChanges } from '../services/intelligence/src/engine/changes.js';
import { EvaluationMetrics } from '../services/intelligence/src/engine/metrics.js';
import { ModelCache } from '../services/intelligence/src/engine/world-model.js';
import { fmt, percentile } from './lib/harness.js';
import { Item } from './lib/stack.js';

const batches = Number(process.argv[2] ?? 200);
const size = Number(process.argv[3] ?? 100);
const keys = size * 10;
const world = 'bench';

const db = await createTestDatabase(testEndpoints().postgresUrl, migrations);
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
try {
  await pool.query(
    `INSERT INTO worlds (id) VALUES ($1);
     INSERT INTO schema_versions (world_id, version, document, event_id) VALUES ($1, 1, $2, gen_random_uuid());
     INSERT INTO derived_definitions (world_id, name, object_type, expression, max_staleness_ms, version, state,
                                      schema_version)
     VALUES ($1, 'doubled', 'Item', 'self.amount * 2', 1000, 1, 'valid', 1)`
      .replaceAll('$1', `'${world}'`)
      .replace('$2', `'${JSON.stringify({ ...emptySchema(), objectTypes: { Item } })}'`),
  );
  const replica = new SchemaReplica(pool, 1000);
  const apply = applyChanges({
    models: new ModelCache(replica),
    ctx: { topicPrefix: 'bench', actions: undefined },
    metrics: new EvaluationMetrics(new Registry(), pool),
    seriesKeepMarginMs: 86_400_000, // the service's default (SERIES_KEEP_MARGIN_MS); no series here
  });
  let seq = 0;
  const versions = new Map<string, number>();
  const batchOf = (n: number): ReceivedEvent[] =>
    Array.from({ length: size }, (_, k) => {
      const pk = `item-${(n * size + k) % keys}`;
      const version = (versions.get(pk) ?? 0) + 1;
      versions.set(pk, version);
      const event = newEvent({
        type: version === 1 ? 'object.created' : 'object.updated',
        worldId: world,
        key: `${world}/Item/${pk}`,
        version,
        producer: 'data',
        producerSeq: ++seq,
        payload: { type: 'Item', pk, version, after: { id: pk, amount: seq }, schemaVersion: 1 },
      });
      return { event } as unknown as ReceivedEvent;
    });
  const run = async (n: number) => {
    const client = await pool.connect();
    try {
      const t = performance.now();
      await client.query('BEGIN');
      const last = (await apply(client, batchOf(n), undefined)) ?? [];
      await queryTogether(client, [...last, { text: 'COMMIT' }]);
      return performance.now() - t;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  };
  for (let n = 0; n < keys / size; n++) await run(n); // every key created: what follows supersedes
  for (let n = 0; n < 20; n++) await run(n); // warm-up
  const ms: number[] = [];
  const t = performance.now();
  for (let n = 0; n < batches; n++) ms.push(await run(n));
  const seconds = (performance.now() - t) / 1000;
  ms.sort((a, b) => a - b);
  const { rows } = await pool.query<{ objects: string; values: string }>(
    `SELECT (SELECT count(*) FROM rm_objects_history)::text AS objects,
            (SELECT count(*) FROM derived_values_history)::text AS values`,
  );
  console.log(
    `${fmt(batches)} batches of ${size} updates: median ${fmt(percentile(ms, 50), 2)} ms, p90 ${fmt(percentile(ms, 90), 2)} ms a batch; ${fmt((batches * size) / seconds)} events/s; history rows: ${rows[0]?.objects} objects, ${rows[0]?.values} values`,
  );
} finally {
  await pool.end();
  await db.drop();
}

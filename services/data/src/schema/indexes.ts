import { enqueueJob, type JobRunner, type Queryable } from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import pg from 'pg';

const MAX_ATTEMPTS = 5;

/** The kinds of index a property gets (docs/adr/0048). */
export type IndexKind = 'btree' | 'gin' | 'text';

interface Claimed {
  name: string;
  object_type: string;
  property: string;
  kind: IndexKind;
  attempts: number;
}

/** The indexed expression and access method of each kind; queries compile to the same expressions (packages/shared/src/ontology/where.ts). */
const KEYS: Record<IndexKind, (property: string) => string> = {
  btree: (property) => `(world_id, (properties -> ${pg.escapeLiteral(property)}), pk)`,
  gin: (property) => `USING gin ((properties -> ${pg.escapeLiteral(property)}) jsonb_path_ops)`,
  text: (property) => `USING gin (to_tsvector('simple'::regconfig, properties ->> ${pg.escapeLiteral(property)}))`,
};

/**
 * The DDL of the index for one (object type, property): partial on the type and live rows, led
 * by the world so that one index serves every world, ordered by the stored JSON value then pk so
 * that filters, sorting and keyset cursors of the list use it. DDL takes no parameters: the names
 * come from the schema (control allows letters, digits and _ only) and are quoted here.
 */
export function indexDdl(
  name: string,
  objectType: string,
  property: string,
  table: 'object_heads' | 'object_history' = 'object_heads',
  kind: IndexKind = 'btree',
): string {
  return `CREATE INDEX CONCURRENTLY IF NOT EXISTS ${pg.escapeIdentifier(name)} ON ${table}
    ${KEYS[kind](property)}
    WHERE type = ${pg.escapeLiteral(objectType)} AND NOT deleted`;
}

/**
 * The same index on history, named after the heads' one: lists at a commit filter and sort the
 * superseded versions too (docs/adr/0023).
 */
export const historyIndexName = (name: string) => `${name}_at`;

/** The job that builds a requested index (docs/adr/0051), keyed by the index's name. */
export const BUILD_INDEX = 'data.build-index';

/** Asks for the build of the index `name` (a row of storage_indexes), in the caller's transaction. */
export const enqueueIndexBuild = (tx: Queryable, name: string) =>
  enqueueJob(tx, BUILD_INDEX, { key: name, maxAttempts: MAX_ATTEMPTS });

/**
 * Builds the indexes the schema replica requests, one at a time, with CREATE INDEX CONCURRENTLY:
 * outside any transaction, so that a new index on a large table never blocks writes. Each request
 * is a job of the service's runner (several instances share the work; a crashed instance's build
 * is taken again after its lease); a build that failed leaves an invalid index, dropped before the
 * next attempt; after MAX_ATTEMPTS the request is `failed`.
 */
export class IndexBuilder {
  constructor(
    private readonly pool: pg.Pool,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Defines the build task on `jobs`. */
  register(jobs: JobRunner): void {
    jobs.define(BUILD_INDEX, (job) => this.build(job.key ?? '', job.attempt, job.signal), {
      // A build can take minutes on a large table: the runner extends the lease while it runs.
      leaseMs: 60_000,
      backoff: { initialMs: 500, maxMs: 30_000 },
    });
  }

  /** Builds the index `name` if it is still requested; throws when the build failed. */
  async build(name: string, attempt: number, signal?: AbortSignal): Promise<void> {
    const { rows } = await this.pool.query<Claimed>(
      `UPDATE storage_indexes SET state = 'building', attempts = attempts + 1, claimed_at = now()
        WHERE name = $1 AND state IN ('pending', 'building')
        RETURNING name, object_type, property, kind, attempts`,
      [name],
    );
    const job = rows[0];
    if (!job) return; // built, failed for good, or no longer requested
    const client = await this.pool.connect();
    // Stopping cancels a build (it can take minutes); the job runs again later.
    const pid = (client as unknown as { processID: number }).processID;
    const cancel = () => void this.pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => {});
    signal?.addEventListener('abort', cancel);
    try {
      for (const [index, table] of [
        [job.name, 'object_heads'],
        [historyIndexName(job.name), 'object_history'],
      ] as const) {
        const existing = await client.query<{ valid: boolean }>(
          `SELECT i.indisvalid AS valid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
            WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`,
          [index],
        );
        if (existing.rows[0]?.valid === false) {
          await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${pg.escapeIdentifier(index)}`);
        }
        await client.query(indexDdl(index, job.object_type, job.property, table, job.kind));
      }
      await client.query(
        "UPDATE storage_indexes SET state = 'ready', ready_at = now(), last_error = NULL WHERE name = $1",
        [job.name],
      );
      this.log.info(
        { index: job.name, objectType: job.object_type, property: job.property, kind: job.kind },
        'index built',
      );
    } catch (err) {
      const state = attempt >= MAX_ATTEMPTS ? 'failed' : 'pending';
      this.log.warn({ err, index: job.name, attempts: job.attempts, state }, 'index build failed');
      await this.pool.query('UPDATE storage_indexes SET state = $2, last_error = $3 WHERE name = $1', [
        job.name,
        state,
        (err as Error).message,
      ]);
      throw err;
    } finally {
      signal?.removeEventListener('abort', cancel);
      client.release();
    }
  }
}

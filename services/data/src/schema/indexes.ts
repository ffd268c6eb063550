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

/** The indexed expression and access method of each kind; queries compile to the same expressions (objects/where.ts). */
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

/**
 * Builds the indexes the schema replica requests, one at a time, with CREATE INDEX CONCURRENTLY:
 * outside any transaction, so that a new index on a large table never blocks writes. Requests are
 * claimed with SKIP LOCKED (several instances share the work); a build that failed leaves an
 * invalid index, dropped before the next attempt; after MAX_ATTEMPTS the request is `failed`.
 */
export class IndexBuilder {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private backendPid: number | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: FastifyBaseLogger,
    private readonly intervalMs = 500,
  ) {}

  start(): void {
    this.stopped = false;
    this.timer = setInterval(() => this.kick(), this.intervalMs);
    this.timer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    // A build can take minutes on a large table: cancel it; the request is retried later.
    if (this.backendPid !== undefined) {
      await this.pool.query('SELECT pg_cancel_backend($1)', [this.backendPid]).catch(() => {});
    }
    await this.running;
  }

  kick(): void {
    if (this.running || this.stopped) return;
    this.running = (async () => {
      try {
        while (!this.stopped && (await this.buildOne())) {}
      } catch (err) {
        this.log.warn({ err }, 'index builder pass failed');
      } finally {
        this.running = undefined;
      }
    })();
  }

  /** Builds the oldest pending index; false when there was none. */
  async buildOne(): Promise<boolean> {
    const { rows } = await this.pool.query<Claimed>(
      `UPDATE storage_indexes SET state = 'building', attempts = attempts + 1, claimed_at = now()
        WHERE name = (
          SELECT name FROM storage_indexes
           WHERE state = 'pending' OR (state = 'building' AND claimed_at < now() - interval '15 minutes')
           ORDER BY requested_at LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING name, object_type, property, kind, attempts`,
    );
    const job = rows[0];
    if (!job) return false;
    const client = await this.pool.connect();
    this.backendPid = (client as unknown as { processID: number }).processID;
    try {
      for (const [name, table] of [
        [job.name, 'object_heads'],
        [historyIndexName(job.name), 'object_history'],
      ] as const) {
        const existing = await client.query<{ valid: boolean }>(
          `SELECT i.indisvalid AS valid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
            WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`,
          [name],
        );
        if (existing.rows[0]?.valid === false) {
          await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${pg.escapeIdentifier(name)}`);
        }
        await client.query(indexDdl(name, job.object_type, job.property, table, job.kind));
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
      const state = job.attempts >= MAX_ATTEMPTS ? 'failed' : 'pending';
      this.log.warn({ err, index: job.name, attempts: job.attempts, state }, 'index build failed');
      await this.pool.query('UPDATE storage_indexes SET state = $2, last_error = $3 WHERE name = $1', [
        job.name,
        state,
        (err as Error).message,
      ]);
      // Retried on a later pass, not at once.
      return false;
    } finally {
      this.backendPid = undefined;
      client.release();
    }
    return true;
  }
}

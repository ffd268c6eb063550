import {
  afterCommit,
  afterRollback,
  ConcurrencyConflictError,
  Conflict,
  markOutboxWritten,
  outboxInsertSql,
  outboxRows,
  StaleWriteError,
  withOcc,
} from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { worldLockSharedSql } from '../http.js';
import { contextOf, contextSql, headValues, insertHeadSql, updateHeadSql } from './repository.js';
import { type ObjectWrite, type ObjectWritten, planObjectWrite } from './write.js';

/**
 * Renders `$n` parameters as literals, for a multi-statement simple query: strings through the
 * connection's escapeLiteral, finite numbers and booleans as themselves, null as NULL.
 */
export function inlineParams(sql: string, values: unknown[], literal: (s: string) => string): string {
  return sql.replace(/\$(\d+)/g, (_, n: string) => {
    const v = values[Number(n) - 1];
    if (v === null || v === undefined) return 'NULL';
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new TypeError(`parameter $${n} is not a finite number`);
      return String(v);
    }
    if (typeof v === 'boolean') return String(v);
    return literal(String(v));
  });
}

/**
 * `writeObject` for a write that owns its transaction (REST PUT and PATCH), in two round trips
 * instead of five: on this kind of machine every query costs a system call on each side, and
 * they, not the work, bound the write rate (docs/adr/0008, "two round trips").
 *
 * 1. `BEGIN; LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE;` the world's drop
 *    lock shared; the world, schema version and head (locked FOR NO KEY UPDATE); `nextval` of
 *    data_seq — taken after the tables' lock, so inside the commit cut as ADR 8 requires.
 * 2. The head and history write with that seq, the outbox rows (guarded: only if our head row was
 *    written), and COMMIT.
 *
 * Same checks, same rows, same event as writeObject; a key created concurrently between the two
 * trips is read again, as there.
 */
export async function writeObjectFast(app: FastifyInstance, w: ObjectWrite): Promise<ObjectWritten> {
  const { worldId, typeName, pk } = w;
  const once = async (): Promise<ObjectWritten> => {
    const client: pg.PoolClient = await app.pg.connect();
    const literal = (s: string) => client.escapeLiteral(s);
    let open = false;
    try {
      open = true;
      const first = (await client.query(
        `BEGIN; LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE; ${worldLockSharedSql(worldId)};
         ${inlineParams(contextSql('FOR NO KEY UPDATE'), [worldId, typeName, pk], literal)};
         SELECT nextval('data_seq')::text AS seq`,
      )) as unknown as pg.QueryResult[];
      const ctx = contextOf(first[3]?.rows[0]);
      const seq = Number(first[4]?.rows[0]?.seq);
      const plan = await planObjectWrite(app, client, w, ctx);
      if (plan.kind === 'unchanged') {
        await client.query('COMMIT');
        open = false;
        return plan.result;
      }
      const rows = outboxRows(plan.event(seq), w.topicPrefix);
      const write = inlineParams(
        (plan.head === null ? insertHeadSql : updateHeadSql)(String(seq)),
        headValues(plan.change),
        literal,
      );
      const ours = `EXISTS (SELECT 1 FROM object_heads WHERE world_id = ${literal(worldId)} AND type = ${literal(typeName)}
                       AND pk = ${literal(pk)} AND seq = ${seq})`;
      const second = (await client.query(
        `${write}; ${outboxInsertSql(rows, literal, ours)}; COMMIT`,
      )) as unknown as pg.QueryResult[];
      open = false;
      // Another transaction created the key between the trips: nothing was written; withOcc
      // runs it again, which reads the new head.
      if ((second[0]?.rowCount ?? 0) === 0) {
        throw new StaleWriteError(`${worldId}/${typeName}/${pk} was created concurrently`);
      }
      markOutboxWritten(client);
      afterCommit(client, app.pg);
      return plan.result(seq);
    } catch (error) {
      if (open) {
        await client.query('ROLLBACK').catch(() => {});
        afterRollback(client);
      }
      throw error;
    } finally {
      client.release();
    }
  };
  try {
    return await withOcc(once, { maxRetries: 3, baseDelayMs: 20 });
  } catch (error) {
    if (error instanceof ConcurrencyConflictError) {
      throw new Conflict('the write kept conflicting with concurrent writes; retry it');
    }
    throw error;
  }
}

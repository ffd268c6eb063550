import {
  ConcurrencyConflictError,
  Conflict,
  inTransactionTogether,
  Outbox,
  StaleWriteError,
  withOcc,
} from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import { worldLockShared } from '../http.js';
import { type ContextRow, contextOf, contextSql, headValues, insertHeadSql, updateHeadSql } from './repository.js';
import { type ObjectWrite, type ObjectWritten, planObjectWrite } from './write.js';

/** unique_violation on object_heads' primary key: the key was created by someone else meanwhile. */
const createdConcurrently = (error: unknown) => {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return e?.code === '23505' && e.constraint === 'object_heads_pkey';
};

/**
 * `writeObject` for a write that owns its transaction (REST PUT and PATCH), in two round trips
 * instead of five (queryTogether): on this kind of machine every statement costs a system call on
 * each side, and they, not the work, bound the write rate (docs/adr/0013).
 *
 * 1. BEGIN, `LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE`, the world's drop lock
 *    shared, the world, schema version and head (locked FOR NO KEY UPDATE), `nextval` of
 *    data_seq — taken after the tables' lock, so inside the commit cut as ADR 8 requires.
 * 2. The head and history write with that seq, the outbox rows, and COMMIT.
 *
 * Same checks, same rows, same event as writeObject. A key created concurrently between the two
 * trips fails the creation (unique_violation), which rolls everything back and is tried again
 * against the new head.
 */
export async function writeObjectFast(app: FastifyInstance, w: ObjectWrite): Promise<ObjectWritten> {
  const { worldId, typeName, pk } = w;
  const once = () =>
    inTransactionTogether(
      app.pg,
      [
        { text: 'LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE' },
        worldLockShared(worldId),
        { text: contextSql('FOR NO KEY UPDATE'), values: [worldId, typeName, pk] },
        { text: "SELECT nextval('data_seq')::text AS seq" },
      ],
      async (tx, [, , context, next]) => {
        const seq = Number(next?.rows[0]?.seq);
        const plan = await planObjectWrite(app, tx, w, contextOf(context?.rows[0] as ContextRow | undefined));
        if (plan.kind === 'unchanged') return { value: plan.result };
        const write = plan.head === null ? insertHeadSql('$9::bigint', 'fail') : updateHeadSql('$9::bigint');
        return {
          value: plan.result(seq),
          last: [
            { text: write, values: [...headValues(plan.change), seq] },
            new Outbox(tx, w.topicPrefix).addStatement(plan.event(seq)),
          ],
        };
      },
    ).catch((error: unknown) => {
      if (createdConcurrently(error))
        throw new StaleWriteError(`${worldId}/${typeName}/${pk} was created concurrently`);
      throw error;
    });
  try {
    return await withOcc(once, { maxRetries: 3, baseDelayMs: 20 });
  } catch (error) {
    if (error instanceof ConcurrencyConflictError) {
      throw new Conflict('the write kept conflicting with concurrent writes; retry it');
    }
    throw error;
  }
}

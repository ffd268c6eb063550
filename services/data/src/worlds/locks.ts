import { advisoryLockKey, ConcurrencyConflictError, Conflict, inTransaction, lockSpace, withOcc } from '@onto/shared';
import type pg from 'pg';

// Advisory lock namespace of worlds: writes hold it shared, dropping a world exclusively.
export const WORLD_LOCK_SPACE = lockSpace('wrld');

/** A world's advisory lock key in WORLD_LOCK_SPACE. */
export const worldLockKey = advisoryLockKey;

/** The same as one SQL text (no parameters: both numbers are computed here), sent with BEGIN. */
export const worldLockSharedSql = (worldId: string) =>
  `SELECT pg_advisory_xact_lock_shared(${WORLD_LOCK_SPACE}, ${worldLockKey(worldId)})`;

/** Takes the world's drop lock exclusively: every write in flight in the world ends first. */
export async function lockWorldForDrop(tx: pg.ClientBase, worldId: string): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock($1, $2)', [WORLD_LOCK_SPACE, worldLockKey(worldId)]);
}

/** Takes the world's drop lock shared in the caller's transaction, as every write does. */
export async function lockWorldShared(tx: pg.ClientBase, worldId: string): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock_shared($1, $2)', [WORLD_LOCK_SPACE, worldLockKey(worldId)]);
}

/**
 * Runs `work` in a READ COMMITTED transaction that holds the world's drop lock shared, so that
 * the world cannot be dropped under the write (and a dropped world's check fails afterwards).
 * Deadlocks are retried; a conflict that outlasts the retries is a 409. Shared advisory locks
 * never wait for each other: writes of a world do not serialise on it.
 */
export async function inWorldTransaction<T>(
  pool: pg.Pool,
  worldId: string,
  work: (tx: pg.PoolClient) => Promise<T>,
): Promise<T> {
  // One round trip with BEGIN.
  return retryWriteConflicts(() => inTransaction(pool, work, 'READ COMMITTED', worldLockSharedSql(worldId)));
}

/** Runs a write's transaction again on conflicts, thrice from 20 ms; one that outlasts them is a 409. */
export async function retryWriteConflicts<T>(once: () => Promise<T>): Promise<T> {
  try {
    return await withOcc(once, { maxRetries: 3, baseDelayMs: 20 });
  } catch (error) {
    if (error instanceof ConcurrencyConflictError) {
      throw new Conflict('the write kept conflicting with concurrent writes; retry it');
    }
    throw error;
  }
}

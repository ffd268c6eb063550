import type pg from 'pg';
import { afterCommit, afterRollback } from '../messaging/outbox-signal.js';

export type Isolation = 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/**
 * A transaction on a client of its own, however its statements travel: `run` sends BEGIN, its
 * work and COMMIT and resolves once committed. When it throws, the transaction is rolled back and
 * the error passes through; the client is released either way, and outbox rows it enqueued wake
 * the relays once committed. Shared by inTransaction and inTransactionTogether.
 */
export async function onTransactionClient<T>(pool: pg.Pool, run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    const result = await run(client);
    afterCommit(client, pool);
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    afterRollback(client);
    throw error;
  } finally {
    client.release();
  }
}

/**
 * Runs `work` in one transaction on a client of its own: committed when it resolves, rolled
 * back when it throws (the error passes through), the client released either way. Outbox rows it
 * enqueued wake the relays once committed.
 */
export function inTransaction<T>(
  pool: pg.Pool,
  work: (tx: pg.PoolClient) => Promise<T>,
  isolation: Isolation = 'READ COMMITTED',
  /** SQL without parameters sent with BEGIN in the same round trip (a lock, a SET LOCAL). */
  prelude = '',
): Promise<T> {
  return onTransactionClient(pool, async (client) => {
    const begin = isolation === 'READ COMMITTED' ? 'BEGIN' : `BEGIN ISOLATION LEVEL ${isolation}`;
    await client.query(prelude ? `${begin}; ${prelude}` : begin);
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  });
}

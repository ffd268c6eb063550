import type pg from 'pg';
import { afterCommit, afterRollback } from '../messaging/outbox-signal.js';

export type Isolation = 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/**
 * Runs `work` in one transaction on a client of its own: committed when it resolves, rolled
 * back when it throws (the error passes through), the client released either way. Outbox rows it
 * enqueued wake the relays once committed.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (tx: pg.PoolClient) => Promise<T>,
  isolation: Isolation = 'READ COMMITTED',
  /** SQL without parameters sent with BEGIN in the same round trip (a lock, a SET LOCAL). */
  prelude = '',
): Promise<T> {
  const client = await pool.connect();
  try {
    const begin = isolation === 'READ COMMITTED' ? 'BEGIN' : `BEGIN ISOLATION LEVEL ${isolation}`;
    await client.query(prelude ? `${begin}; ${prelude}` : begin);
    const result = await work(client);
    await client.query('COMMIT');
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

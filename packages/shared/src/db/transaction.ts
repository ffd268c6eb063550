import type pg from 'pg';

export type Isolation = 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/** Work to do once a transaction has committed, given the pool it ran on. */
export type CommitHook = (pool: pg.Pool) => void;

/** The clients of the transactions running in onTransactionClient, with their commit hooks. */
const running = new WeakMap<object, { pool: pg.Pool; hooks: Set<CommitHook> }>();

/**
 * Runs `hook` once the transaction `client` is running (in inTransaction or
 * inTransactionTogether) has committed, once however often it is asked; forgotten when it rolls
 * back. Answers false, doing nothing, when `client` runs no such transaction.
 */
export function onCommit(client: unknown, hook: CommitHook): boolean {
  const transaction = client !== null && typeof client === 'object' ? running.get(client) : undefined;
  transaction?.hooks.add(hook);
  return transaction !== undefined;
}

/**
 * A transaction on a client of its own, however its statements travel: `run` sends BEGIN, its
 * work and COMMIT and resolves once committed. When it throws, the transaction is rolled back and
 * the error passes through; the client is released either way, and its commit hooks (onCommit)
 * run once committed. Shared by inTransaction and inTransactionTogether.
 */
export async function onTransactionClient<T>(pool: pg.Pool, run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  const transaction = { pool, hooks: new Set<CommitHook>() };
  running.set(client, transaction);
  let result: T;
  try {
    result = await run(client);
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    running.delete(client);
    client.release();
  }
  for (const hook of transaction.hooks) hook(pool);
  return result;
}

/**
 * Runs `work` in one transaction on a client of its own: committed when it resolves, rolled
 * back when it throws (the error passes through), the client released either way; its commit
 * hooks (onCommit) run once committed.
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

import type pg from 'pg';

/** The tables whose writers take their seq in a statement writing to them (series: series/repository.ts nextSeq). */
const CUT_LOCK = 'LOCK TABLE object_heads, object_history, link_heads, link_history, series_batches IN SHARE MODE';

/**
 * Cuts a commit point of data (docs/adr/0008): every write with `seq <= c` has committed or
 * rolled back, every later write gets `seq > c`. Writers take their seq inside a statement that
 * holds ROW EXCLUSIVE on these tables, which SHARE mode waits for; new writers wait for the cut,
 * an instant. The lock timeout bounds how long a slow writer can hold everyone up behind the cut.
 */
export async function cutCommit(pool: pg.Pool, lockTimeoutMs = 2000): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.trunc(lockTimeoutMs))}`);
    await client.query(CUT_LOCK);
    const { rows } = await client.query<{ c: number }>(
      'SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS c FROM data_seq',
    );
    await client.query('COMMIT');
    return rows[0]?.c ?? 0;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/**
 * The same cut inside the caller's transaction (the fork in the world.created inbox
 * transaction): writers wait until it commits, a few milliseconds later. The lock timeout is set
 * back afterwards; on a timeout the transaction fails and is retried.
 */
export async function cutCommitIn(tx: pg.ClientBase, lockTimeoutMs = 2000): Promise<number> {
  await tx.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.trunc(lockTimeoutMs))}`);
  await tx.query(CUT_LOCK);
  await tx.query('SET LOCAL lock_timeout TO DEFAULT');
  const { rows } = await tx.query<{ c: string }>(
    'SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS c FROM data_seq',
  );
  return Number(rows[0]?.c ?? 0);
}

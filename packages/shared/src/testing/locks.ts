import type pg from 'pg';
import { type EventuallyOptions, eventually } from './eventually.js';

/**
 * Waits until a session of `pool`'s database waits for a lock in a statement like `statement` (a
 * LIKE pattern): the statement a test holds back has been sent and is blocked, not merely slow.
 */
export async function blockedOnLock(pool: pg.Pool, statement: string, options: EventuallyOptions = {}): Promise<void> {
  await eventually(
    `a statement like ${statement} waiting for a lock`,
    async () => {
      const { rowCount } = await pool.query(
        `SELECT 1 FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
        [statement],
      );
      return (rowCount ?? 0) > 0;
    },
    options,
  );
}

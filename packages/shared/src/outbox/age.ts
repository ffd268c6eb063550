import type { Queryable } from './outbox.js';

/** The age in seconds of the oldest outbox row not sent yet (0 when none): what the checker bounds. */
export async function outboxOldestAgeSeconds(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ age: number | null }>(
    `SELECT extract(epoch FROM now() - min(o.created_at))::float8 AS age
       FROM outbox_pending p JOIN outbox o ON o.id = p.id`,
  );
  return Math.max(0, rows[0]?.age ?? 0);
}

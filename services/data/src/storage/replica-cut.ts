import { everyInProcess, type InProcessTask } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import { cutCommitIn } from './commit.js';

/*
 * Commit points for the read replicas (docs/adr/0083). A list, a query or an aggregation reads one
 * commit, and only the primary can cut one (the cut's SHARE lock waits for writers; a replica takes
 * no such lock). A read that cuts on the primary must then wait for a replica to replay the
 * primary's position, or be served by the primary. So each instance, while writes go on, cuts a
 * commit every REPLICA_CUT_MS and records it in `replica_cut` in the cutting transaction: a replica
 * that shows the row has every write up to it. Reads without a consistency token are served by a
 * replica at the newest cut it has replayed (pinnedRead in worlds/refs.ts); reads with one keep the
 * primary's cut (ADR 80).
 */

/** Cuts a commit for the replicas every `periodMs` while data_seq moves; stopped with the app. */
export function startReplicaCuts(app: FastifyInstance, periodMs: number): InProcessTask {
  let last: string | undefined;
  return everyInProcess(
    'cutting commit points for the read replicas',
    periodMs,
    async () => {
      const { rows } = await app.pg.query<{ seq: string }>(
        'SELECT CASE WHEN is_called THEN last_value ELSE 0 END::text AS seq FROM data_seq',
      );
      const seq = rows[0]?.seq;
      if (seq === undefined || seq === last) return;
      const client = await app.pg.connect();
      try {
        await client.query('BEGIN');
        const cut = await cutCommitIn(client, 200);
        await client.query(
          `INSERT INTO replica_cut AS r (commit) VALUES ($1) ON CONFLICT (one)
           DO UPDATE SET commit = EXCLUDED.commit, cut_at = now() WHERE r.commit < EXCLUDED.commit`,
          [cut],
        );
        await client.query('COMMIT');
        last = seq;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        // Writers held the tables past the lock timeout: the next round cuts (nothing to report).
        if ((error as { code?: string }).code === '55P03') return;
        throw error;
      } finally {
        client.release();
      }
    },
    app.log,
  );
}

import { advisoryLockKey, lockSpace, type Queryable, type Statement } from '@onto/shared';

// Advisory lock namespace of a world's evaluation: every transaction that reads or changes what
// a world's derived values, alerts or definitions depend on holds it.
const WORLD_LOCK_SPACE = lockSpace('ievl');

/**
 * Serialises a world's evaluation until the transaction ends (docs/adr/0010): a recompute reads
 * linked objects that another transaction may be changing, so two recomputes of one world never
 * overlap. Worlds are locked in one sorted order, so two batches never deadlock on them.
 */
export async function lockWorlds(tx: Queryable, worldIds: Iterable<string>): Promise<void> {
  const statement = lockWorldsStatement(worldIds);
  if (statement) await tx.query(statement.text, statement.values as unknown[]);
}

/**
 * The same as a statement, to send ahead of the reads that must follow it: in one round trip,
 * each later statement still takes its snapshot after the locks are held (see queryTogether).
 */
export function lockWorldsStatement(worldIds: Iterable<string>): Statement | undefined {
  const keys = [...new Set(worldIds)].sort();
  if (keys.length === 0) return undefined;
  return {
    text: 'SELECT pg_advisory_xact_lock($1, k) FROM unnest($2::int[]) WITH ORDINALITY AS u(k, n) ORDER BY n',
    values: [WORLD_LOCK_SPACE, keys.map(advisoryLockKey)],
  };
}

/** Marks a change of the world's definitions: cached evaluation models of it are outdated. */
export async function bumpRevision(tx: Queryable, worldId: string): Promise<void> {
  await tx.query(
    `INSERT INTO definition_revisions (world_id, revision) VALUES ($1, 1)
     ON CONFLICT (world_id) DO UPDATE SET revision = definition_revisions.revision + 1`,
    [worldId],
  );
}

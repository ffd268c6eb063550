import { newEvent, Outbox, StaleWriteError, TOPICS } from '@onto/shared';
import type pg from 'pg';
import { diffSchemas, emptySchema, type SchemaDiff, type SchemaDocument } from './model.js';

export interface SchemaHead {
  version: number;
  document: SchemaDocument;
}

/** The world's current schema (version 0 and empty before its first change). */
export async function currentSchema(db: pg.ClientBase | pg.Pool, worldId: string): Promise<SchemaHead> {
  const { rows } = await db.query<SchemaHead>(
    'SELECT version, document FROM schema_versions WHERE world_id = $1 ORDER BY version DESC LIMIT 1',
    [worldId],
  );
  return rows[0] ?? { version: 0, document: emptySchema() };
}

/** The schema as one version left it; undefined when the world has no such version. */
export async function schemaAt(db: pg.ClientBase | pg.Pool, worldId: string, version: number) {
  const { rows } = await db.query<SchemaHead>(
    'SELECT version, document FROM schema_versions WHERE world_id = $1 AND version = $2',
    [worldId, version],
  );
  return rows[0];
}

export interface SchemaChange {
  worldId: string;
  author: string;
  requestId: string;
  before: SchemaHead;
  after: SchemaDocument;
  topicPrefix: string;
}

/**
 * Writes the next version with its diff and enqueues `schema.updated` (the whole document, so
 * that consumers never need to ask control), all in the caller's transaction. Returns null when
 * the change changes nothing.
 */
export async function writeVersion(
  tx: pg.ClientBase,
  change: SchemaChange,
): Promise<{ version: number; diff: SchemaDiff } | null> {
  const diff = diffSchemas(change.before.document, change.after);
  if (diff.changes.length === 0) return null;
  const version = change.before.version + 1;
  try {
    await tx.query(
      `INSERT INTO schema_versions (world_id, version, document, diff, breaking, author, request_id)
       VALUES ($1, $2, $3, $4, $5, $6, $7)`,
      [change.worldId, version, change.after, diff, diff.breaking, change.author, change.requestId],
    );
  } catch (error) {
    // Another writer took this version first: retried, and then judged against If-Match.
    if ((error as { code?: string }).code === '23505')
      throw new StaleWriteError(`version ${version} of ${change.worldId} exists`);
    throw error;
  }
  const event = newEvent({
    type: 'schema.updated',
    worldId: change.worldId,
    key: change.worldId,
    version,
    producer: 'control',
    producerSeq: version,
    payload: { version, previousVersion: change.before.version, diff, schema: change.after, author: change.author },
  });
  await new Outbox(tx, change.topicPrefix).add({
    event,
    key: TOPICS['onto.schema'].key({ worldId: change.worldId }),
    headers: { 'x-request-id': change.requestId },
  });
  return { version, diff };
}

export interface HistoryEntry {
  version: number;
  diff: SchemaDiff;
  breaking: boolean;
  author: string;
  requestId: string | null;
  createdAt: string;
}

export async function history(db: pg.Pool, worldId: string, before: number, limit: number): Promise<HistoryEntry[]> {
  const { rows } = await db.query<HistoryEntry>(
    `SELECT version, diff, breaking, author, request_id AS "requestId", to_json(created_at)#>>'{}' AS "createdAt"
       FROM schema_versions WHERE world_id = $1 AND version < $2 ORDER BY version DESC LIMIT $3`,
    [worldId, before, limit],
  );
  return rows;
}

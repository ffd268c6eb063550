import type pg from 'pg';
import { awaitApplied } from '../http/consistency.js';
import type { Queryable } from '../outbox/outbox.js';
import { emptySchema, type SchemaDocument } from './schema.js';

/*
 * A service's replica of every world's schema, from schema.updated on onto.schema: each version
 * in `schema_versions` (world_id, version, document, diff, event_id, received_at). A world's
 * applied schema is its highest version there, so a replayed or older event never moves it back.
 */

/** The world's applied schema version: the highest replicated (0 before the first). */
export async function replicaVersion(db: Queryable, worldId: string): Promise<number> {
  const { rows } = await db.query<{ version: number }>(
    'SELECT coalesce(max(version), 0) AS version FROM schema_versions WHERE world_id = $1',
    [worldId],
  );
  return rows[0]?.version ?? 0;
}

/**
 * The replica as the routes use it: documents cached by (world, version) — a version never
 * changes — and the bounded wait for a version a caller has seen in control.
 */
export class SchemaReplica {
  private readonly cache = new Map<string, { version: number; document: SchemaDocument }>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly waitBoundMs: number,
    private readonly maxCached = 1000,
  ) {}

  /** The document of a version the caller has read from schema_versions. */
  async document(db: Queryable, worldId: string, version: number): Promise<SchemaDocument> {
    if (version === 0) return emptySchema();
    const hit = this.cache.get(worldId);
    if (hit?.version === version) return hit.document;
    const { rows } = await db.query<{ document: SchemaDocument }>(
      'SELECT document FROM schema_versions WHERE world_id = $1 AND version = $2',
      [worldId, version],
    );
    const document = rows[0]?.document;
    if (!document) throw new Error(`schema version ${version} of ${worldId} vanished`);
    if (!hit || hit.version < version) {
      this.cache.delete(worldId);
      this.cache.set(worldId, { version, document });
      if (this.cache.size > this.maxCached) this.cache.delete(this.cache.keys().next().value as string);
    }
    return document;
  }

  /** The world's applied version and its document (version 0 and the empty schema before the first). */
  async current(db: Queryable, worldId: string): Promise<{ version: number; document: SchemaDocument }> {
    const version = await replicaVersion(db, worldId);
    return { version, document: await this.document(db, worldId, version) };
  }

  /**
   * Waits until the world's replica has applied `wanted` (a version the caller saw in control),
   * polling with a growing interval, at most the bound; then 503 with Retry-After.
   */
  awaitVersion(worldId: string, wanted: number): Promise<number> {
    return awaitApplied(
      () => replicaVersion(this.pool, worldId),
      wanted,
      { boundMs: this.waitBoundMs, poll: { initialMs: 10, maxMs: 200 } },
      (version) => `data has applied schema version ${version} of ${worldId}, not yet ${wanted}; retry shortly`,
    );
  }
}

export interface SchemaUpdated {
  version: number;
  schema: SchemaDocument;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function schemaUpdated(payload: Record<string, unknown>): SchemaUpdated {
  const { version, schema } = payload;
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) {
    throw new TypeError('schema.updated: payload.version must be a positive integer');
  }
  if (!isRecord(schema) || !isRecord(schema.objectTypes) || !isRecord(schema.linkTypes)) {
    throw new TypeError('schema.updated: payload.schema must be a schema document');
  }
  return { version, schema: { actionTypes: {}, ...schema } as SchemaDocument };
}

/**
 * Stores the version a schema.updated event carries (a replay is a no-op); returns it and the
 * version applied before, so the caller can tell whether it is newer.
 */
export async function storeSchemaVersion(
  tx: Queryable,
  event: { world_id: string; event_id: string; payload: Record<string, unknown> },
): Promise<SchemaUpdated & { previous: number }> {
  const { version, schema } = schemaUpdated(event.payload);
  const previous = await replicaVersion(tx, event.world_id);
  await tx.query(
    `INSERT INTO schema_versions (world_id, version, document, diff, event_id)
     VALUES ($1, $2, $3::jsonb, $4::jsonb, $5) ON CONFLICT (world_id, version) DO NOTHING`,
    [event.world_id, version, JSON.stringify(schema), JSON.stringify(event.payload.diff ?? null), event.event_id],
  );
  return { version, schema, previous };
}

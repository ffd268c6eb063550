import { createHash } from 'node:crypto';
import {
  type ApplyEffects,
  emptySchema,
  enqueue,
  newEvent,
  type Queryable,
  type SchemaDocument,
  TOPICS,
  Unavailable,
} from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import type pg from 'pg';

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

  /**
   * Waits until the world's replica has applied `wanted` (a version the caller saw in control),
   * polling with a growing interval, at most the bound; then 503 with Retry-After.
   */
  async awaitVersion(worldId: string, wanted: number): Promise<number> {
    const deadline = Date.now() + this.waitBoundMs;
    let delay = 10;
    for (;;) {
      const version = await replicaVersion(this.pool, worldId);
      if (version >= wanted) return version;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Unavailable(
          `data has applied schema version ${version} of ${worldId}, not yet ${wanted}; retry shortly`,
          Math.max(1, Math.ceil(this.waitBoundMs / 1000)),
        );
      }
      await new Promise((r) => setTimeout(r, Math.min(delay, left)));
      delay = Math.min(delay * 2, 200);
    }
  }
}

interface SchemaUpdated {
  version: number;
  schema: SchemaDocument;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function schemaUpdated(payload: Record<string, unknown>): SchemaUpdated {
  const { version, schema } = payload;
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) {
    throw new TypeError('schema.updated: payload.version must be a positive integer');
  }
  if (!isRecord(schema) || !isRecord(schema.objectTypes) || !isRecord(schema.linkTypes)) {
    throw new TypeError('schema.updated: payload.schema must be a schema document');
  }
  return { version, schema: { actionTypes: {}, ...schema } as SchemaDocument };
}

/** The name of the index shared by every world that indexes `property` of `objectType`. */
export function indexName(objectType: string, property: string): string {
  return `objects_ix_${createHash('sha256').update(`${objectType}\u0000${property}`).digest('hex').slice(0, 24)}`;
}

/** Asks the index builder for the indexes a schema's indexed properties need (idempotent). */
async function requestIndexes(tx: Queryable, schema: SchemaDocument) {
  const wanted = Object.values(schema.objectTypes).flatMap((type) =>
    Object.entries(type.properties ?? {})
      .filter(([, def]) => def.indexed === true)
      .map(([property]) => ({ name: indexName(type.apiName, property), objectType: type.apiName, property })),
  );
  if (wanted.length === 0) return [];
  const { rows } = await tx.query<{ name: string; objectType: string; property: string; state: string }>(
    `WITH wanted AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS w(name, object_type, property)
     ), added AS (
       INSERT INTO storage_indexes (name, object_type, property)
       SELECT name, object_type, property FROM wanted
       ON CONFLICT (object_type, property) DO UPDATE SET state = 'pending', attempts = 0, requested_at = now()
         WHERE storage_indexes.state = 'failed'
       RETURNING name, state
     )
     SELECT w.name, w.object_type AS "objectType", w.property, coalesce(a.state, s.state) AS state
       FROM wanted w LEFT JOIN added a USING (name) LEFT JOIN storage_indexes s USING (name)
      ORDER BY w.object_type, w.property`,
    [wanted.map((w) => w.name), wanted.map((w) => w.objectType), wanted.map((w) => w.property)],
  );
  return rows;
}

/**
 * The effect of `schema.updated`: the version is stored (a replay or an older version is a
 * no-op and never moves the world's schema back); a newer one requests the indexes it needs and
 * announces `storage.schema.updated` on onto.storage, caused by the schema event, in the same
 * transaction.
 */
export function applySchemaEvents(topicPrefix: string, log: FastifyBaseLogger): ApplyEffects {
  return async (tx: pg.PoolClient, events) => {
    for (const { event } of events) {
      if (event.type !== 'schema.updated') continue;
      const { version, schema } = schemaUpdated(event.payload);
      const worldId = event.world_id;
      const previous = await replicaVersion(tx, worldId);
      await tx.query(
        `INSERT INTO schema_versions (world_id, version, document, diff, event_id)
         VALUES ($1, $2, $3::jsonb, $4::jsonb, $5) ON CONFLICT (world_id, version) DO NOTHING`,
        [worldId, version, JSON.stringify(schema), JSON.stringify(event.payload.diff ?? null), event.event_id],
      );
      if (version <= previous) {
        log.info({ worldId, version, previous }, 'schema version older than the applied one: stored, not applied');
        continue;
      }
      const indexes = await requestIndexes(tx, schema);
      const applied = newEvent({
        type: 'storage.schema.updated',
        worldId,
        key: worldId,
        version,
        producer: 'data',
        producerSeq: version,
        causedBy: event.event_id,
        payload: { world: worldId, version, previousVersion: previous, indexes },
      });
      await enqueue(tx, { event: applied, key: TOPICS['onto.storage'].key({ worldId }) }, topicPrefix);
    }
  };
}

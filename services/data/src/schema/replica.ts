import { createHash } from 'node:crypto';
import {
  type ApplyEffects,
  newEvent,
  Outbox,
  type PropertyDef,
  type Queryable,
  type SchemaDocument,
  storeSchemaVersion,
  TOPICS,
} from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import type pg from 'pg';
import { enqueueIndexBuild, type IndexKind } from './indexes.js';

/** The name of the index shared by every world that indexes `property` of `objectType`. */
export function indexName(objectType: string, property: string, kind: IndexKind = 'btree'): string {
  const key = kind === 'btree' ? `${objectType}\u0000${property}` : `${objectType}\u0000${property}\u0000${kind}`;
  return `objects_ix_${createHash('sha256').update(key).digest('hex').slice(0, 24)}`;
}

/**
 * The indexes an indexed property gets (docs/adr/0048): a B-tree of its value; arrays also a GIN
 * for $contains, strings a GIN of their words for full-text search.
 */
export function indexKinds(def: PropertyDef): IndexKind[] {
  const kind = typeof def.type === 'string' ? def.type : def.type.type;
  if (kind === 'array') return ['btree', 'gin'];
  if (kind === 'string') return ['btree', 'text'];
  return ['btree'];
}

/** Asks the index builder for the indexes a schema's indexed properties need (idempotent). */
async function requestIndexes(tx: Queryable, schema: SchemaDocument) {
  const wanted = Object.values(schema.objectTypes).flatMap((type) =>
    Object.entries(type.properties ?? {})
      .filter(([, def]) => def.indexed === true)
      .flatMap(([property, def]) =>
        indexKinds(def).map((kind) => ({
          name: indexName(type.apiName, property, kind),
          objectType: type.apiName,
          property,
          kind,
        })),
      ),
  );
  if (wanted.length === 0) return [];
  const { rows } = await tx.query<{ name: string; objectType: string; property: string; state: string }>(
    `WITH wanted AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS w(name, object_type, property, kind)
     ), added AS (
       INSERT INTO storage_indexes (name, object_type, property, kind)
       SELECT name, object_type, property, kind FROM wanted
       ON CONFLICT (object_type, property, kind) DO UPDATE SET state = 'pending', attempts = 0, requested_at = now()
         WHERE storage_indexes.state = 'failed'
       RETURNING name, state
     )
     SELECT w.name, w.object_type AS "objectType", w.property, coalesce(a.state, s.state) AS state
       FROM wanted w LEFT JOIN added a USING (name) LEFT JOIN storage_indexes s USING (name)
      ORDER BY w.object_type, w.property`,
    [
      wanted.map((w) => w.name),
      wanted.map((w) => w.objectType),
      wanted.map((w) => w.property),
      wanted.map((w) => w.kind),
    ],
  );
  for (const row of rows) if (row.state === 'pending') await enqueueIndexBuild(tx, row.name);
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
      const { version, schema, previous } = await storeSchemaVersion(tx, event);
      const worldId = event.world_id;
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
      await new Outbox(tx, topicPrefix).add({ event: applied, key: TOPICS['onto.storage'].key({ worldId }) });
    }
  };
}

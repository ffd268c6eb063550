import { createHash } from 'node:crypto';
import {
  type ApplyEffects,
  newEvent,
  Outbox,
  type Queryable,
  type SchemaDocument,
  storeSchemaVersion,
  TOPICS,
} from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import type pg from 'pg';
import { enqueueIndexBuild } from './indexes.js';

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

import { HttpProblem, ownValue, setOwn } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import type { Origin } from '../events.js';
import { writeObject } from '../objects/change.js';
import { checkObject, LIMITS, stringFault } from '../objects/model.js';
import { objectContext } from '../objects/repository.js';
import { tombstoneObject } from '../objects/tombstone.js';
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { inWorldTransaction } from '../worlds/locks.js';
import type { CdcMapping, ChangeRecord } from './mapping.js';

/** Where a record was read: recorded with the position, and the request id of its writes. */
export interface Coordinates {
  topic: string;
  partition: number;
  offset: string;
}

/** A record the mapping or the schema refuses: dead-lettered, never retried. */
export class CdcRefusal extends Error {
  override readonly name = 'CdcRefusal';
  constructor(
    message: string,
    readonly errors: { path: string; message: string }[] = [],
  ) {
    super(message);
  }
}

export type Outcome = 'applied' | 'unchanged' | 'skipped';

/** The primary key of a row: its key column's value as text. */
function pkOf(m: CdcMapping, row: Record<string, unknown>): string {
  const v = ownValue(row, m.primaryKey);
  if (typeof v !== 'string' && typeof v !== 'number') {
    throw new CdcRefusal(`the key column ${m.primaryKey} is missing or not a string or number`, [
      { path: `/${m.primaryKey}`, message: 'is required (the primary key)' },
    ]);
  }
  const pk = String(v);
  const fault = pk.length === 0 ? 'must not be empty' : stringFault(pk, LIMITS.pkLength);
  if (fault) throw new CdcRefusal(`the primary key ${fault}`, [{ path: `/${m.primaryKey}`, message: fault }]);
  return pk;
}

/**
 * Applies one change in one transaction: the object's last applied source position is advanced
 * first (a row lock that serialises every change of the object); when the change is not newer
 * (a redelivery, or an older change arriving late) nothing else happens. Then c/u/r write the
 * mapped row as PUT does and d deletes as DELETE does (tombstone, links, events).
 */
export async function applyChange(
  app: FastifyInstance,
  m: CdcMapping,
  change: ChangeRecord,
  at: Coordinates,
): Promise<Outcome> {
  const row = (change.op === 'd' ? change.before : change.after) as Record<string, unknown>;
  const pk = pkOf(m, row);
  const origin: Origin = {
    actor: `cdc:${m.source}`,
    requestId: `cdc:${at.topic}:${at.partition}:${at.offset}`,
    causedBy: null,
  };
  try {
    return await inWorldTransaction(app.pg, m.world, async (tx) => {
      const { rowCount } = await tx.query(
        `INSERT INTO cdc_positions AS p (source, world_id, type, pk, position, topic, partition, "offset")
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (world_id, source, type, pk) DO UPDATE
            SET position = excluded.position, topic = excluded.topic, partition = excluded.partition,
                "offset" = excluded."offset", applied_at = now()
          WHERE p.position < excluded.position`,
        [m.source, m.world, m.objectType, pk, change.position.toString(), at.topic, at.partition, at.offset],
      );
      if (rowCount === 0) return 'skipped';
      return change.op === 'd' ? remove(app, tx, m, pk, origin) : upsert(app, tx, m, pk, row, origin);
    });
  } catch (error) {
    // The schema's verdicts (unknown world or type, invalid row) are the record's fault.
    if (error instanceof HttpProblem && (error.status === 404 || error.status === 422)) {
      throw new CdcRefusal(error.message, error.extensions.errors ?? []);
    }
    throw error;
  }
}

async function upsert(
  app: FastifyInstance,
  tx: pg.PoolClient,
  m: CdcMapping,
  pk: string,
  row: Record<string, unknown>,
  origin: Origin,
): Promise<Outcome> {
  const input: Record<string, unknown> = {};
  for (const [property, column] of Object.entries(m.properties)) {
    if (Object.hasOwn(row, column)) setOwn(input, property, row[column]);
  }
  const written = await writeObject(app, tx, {
    worldId: m.world,
    typeName: m.objectType,
    pk,
    origin,
    topicPrefix: app.topicPrefix,
    via: 'cdc',
    decide: (type) => checkObject(type, input, pk),
  });
  return written.changed ? 'applied' : 'unchanged';
}

/** As DELETE does: the object's links go first, each with its event, then the tombstone. */
async function remove(
  app: FastifyInstance,
  tx: pg.PoolClient,
  m: CdcMapping,
  pk: string,
  origin: Origin,
): Promise<Outcome> {
  const ctx = await objectContext(tx, m.world, m.objectType, pk, 'FOR UPDATE');
  if (!ctx.provisioned) throw notProvisioned(m.world);
  const { doc } = await objectTypeOf(app, tx, m.world, m.objectType, ctx.schemaVersion);
  const head = ctx.head;
  if (!head || head.deleted) return 'unchanged';
  await tombstoneObject(tx, {
    worldId: m.world,
    type: m.objectType,
    pk,
    head,
    schemaVersion: ctx.schemaVersion,
    schema: doc,
    forked: ctx.forked ?? false,
    origin,
    topicPrefix: app.topicPrefix,
  });
  return 'applied';
}

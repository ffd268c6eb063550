import { canonicalJson, enqueue, NotFound, type ObjectType, StaleWriteError, Unprocessable } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { type Origin, objectChange } from '../events.js';
import type { LiveLink } from '../links/repository.js';
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { type Checked, capped, type Properties } from './model.js';
import { type Head, insertHead, objectContext, updateHead } from './repository.js';
import { tombstoneObject } from './tombstone.js';

/*
 * The write path of objects, shared by every way in: REST (PUT, PATCH, DELETE), CDC and the steps
 * of actions. Each runs in the caller's transaction (which holds the world's drop lock shared),
 * checks against the world's replicated schema and enqueues its change event there.
 */

export interface ObjectWrite {
  worldId: string;
  typeName: string;
  pk: string;
  origin: Origin;
  topicPrefix: string;
  /** Checks the locked head before anything is decided (preconditions); throws to refuse. */
  check?: (head: Head | null) => void;
  /** The new properties from the locked head; errors in the result are a 422. */
  decide: (type: ObjectType, head: Head | null) => Checked;
}

export interface ObjectWritten {
  /** 201 when the object came to life, 200 when replaced or unchanged. */
  status: 200 | 201;
  /** false when the stored properties already were these: nothing written, no event. */
  changed: boolean;
  version: number;
  seq: number;
  properties: Properties;
  /** The head as it was before the write. */
  before: Head | null;
}

const same = (a: Properties | null, b: Properties) => a !== null && canonicalJson(a) === canonicalJson(b);

/** Creates, replaces or revives an object: the head is locked, `decide` makes the properties. */
export async function writeObject(app: FastifyInstance, tx: pg.PoolClient, w: ObjectWrite): Promise<ObjectWritten> {
  const { worldId, typeName, pk, origin } = w;
  for (let attempt = 0; ; attempt++) {
    const ctx = await objectContext(tx, worldId, typeName, pk, 'FOR NO KEY UPDATE');
    if (!ctx.provisioned) throw notProvisioned(worldId);
    const { type } = await objectTypeOf(app, tx, worldId, typeName, ctx.schemaVersion);
    const head = ctx.head;
    w.check?.(head);
    const checked = w.decide(type, head);
    if (checked.errors.length > 0) {
      throw new Unprocessable(`the ${typeName} does not match the schema of ${worldId}`, capped(checked.errors));
    }
    const live = head !== null && !head.deleted;
    if (live && same(head.properties, checked.properties)) {
      return {
        status: 200,
        changed: false,
        version: head.version,
        seq: head.seq,
        properties: head.properties as Properties,
        before: head,
      };
    }
    const change = {
      worldId,
      type: typeName,
      pk,
      version: (head?.version ?? 0) + 1,
      properties: checked.properties,
      schemaVersion: ctx.schemaVersion,
      actor: origin.actor,
      requestId: origin.requestId,
    };
    const seq = head === null ? await insertHead(tx, change) : await updateHead(tx, change);
    if (seq === null) {
      // Another transaction created the object between our read and insert: read it again, locked.
      if (attempt < 3) continue;
      throw new StaleWriteError(`${worldId}/${typeName}/${pk} keeps being created concurrently`);
    }
    await enqueue(
      tx,
      objectChange(
        {
          worldId,
          type: typeName,
          pk,
          kind: live ? 'updated' : 'created',
          version: change.version,
          seq,
          before: live ? head.properties : null,
          after: checked.properties,
          schemaVersion: ctx.schemaVersion,
        },
        origin,
      ),
      w.topicPrefix,
    );
    return {
      status: live ? 200 : 201,
      changed: true,
      version: change.version,
      seq,
      properties: checked.properties,
      before: head,
    };
  }
}

export interface ObjectDelete {
  worldId: string;
  typeName: string;
  pk: string;
  origin: Origin;
  topicPrefix: string;
  /** Checks the locked live head (preconditions); throws to refuse. */
  check?: (head: Head) => void;
}

/** Deletes a live object and its links (404 when there is none), as DELETE does. */
export async function deleteObject(
  app: FastifyInstance,
  tx: pg.PoolClient,
  d: ObjectDelete,
): Promise<{ version: number; seq: number; before: Head; removedLinks: LiveLink[] }> {
  const { worldId, typeName, pk } = d;
  const ctx = await objectContext(tx, worldId, typeName, pk, 'FOR UPDATE');
  if (!ctx.provisioned) throw notProvisioned(worldId);
  const { doc } = await objectTypeOf(app, tx, worldId, typeName, ctx.schemaVersion);
  const head = ctx.head;
  if (!head || head.deleted) throw new NotFound(`${typeName} ${pk} does not exist in ${worldId}`);
  d.check?.(head);
  const done = await tombstoneObject(tx, {
    worldId,
    type: typeName,
    pk,
    head,
    schemaVersion: ctx.schemaVersion,
    schema: doc,
    origin: d.origin,
    topicPrefix: d.topicPrefix,
  });
  return { ...done, before: head };
}

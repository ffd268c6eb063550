import {
  canonicalJson,
  NotFound,
  type ObjectType,
  Outbox,
  type OutboxMessage,
  type Queryable,
  StaleWriteError,
  Unprocessable,
} from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { type Origin, objectChange } from '../events.js';
import type { LiveLink } from '../links/repository.js';
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { type Checked, capped, type Properties } from './model.js';
import { type Head, type HeadWrite, insertHead, type ObjectContext, objectContext, updateHead } from './repository.js';
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

/**
 * What a write decides once it holds the object's context (head locked): nothing to write (the
 * stored properties already are these), or the head to write and, given the write's seq, its
 * change event and its answer. Refusals (preconditions, schema) are thrown. Shared by writeObject
 * and its two-round-trip form (write-fast.ts), so that both check and emit exactly the same.
 */
export type WritePlan =
  | { kind: 'unchanged'; result: ObjectWritten }
  | {
      kind: 'write';
      change: HeadWrite;
      head: Head | null;
      event: (seq: number) => OutboxMessage;
      result: (seq: number) => ObjectWritten;
    };

export async function planObjectWrite(
  app: FastifyInstance,
  db: Queryable,
  w: ObjectWrite,
  ctx: ObjectContext,
): Promise<WritePlan> {
  const { worldId, typeName, pk, origin } = w;
  if (!ctx.provisioned) throw notProvisioned(worldId);
  const { type } = await objectTypeOf(app, db, worldId, typeName, ctx.schemaVersion);
  const head = ctx.head;
  w.check?.(head);
  const checked = w.decide(type, head);
  if (checked.errors.length > 0) {
    throw new Unprocessable(`the ${typeName} does not match the schema of ${worldId}`, capped(checked.errors));
  }
  const live = head !== null && !head.deleted;
  if (live && same(head.properties, checked.properties)) {
    const properties = head.properties as Properties;
    return {
      kind: 'unchanged',
      result: { status: 200, changed: false, version: head.version, seq: head.seq, properties, before: head },
    };
  }
  const change: HeadWrite = {
    worldId,
    type: typeName,
    pk,
    version: (head?.version ?? 0) + 1,
    properties: checked.properties,
    schemaVersion: ctx.schemaVersion,
    actor: origin.actor,
    requestId: origin.requestId,
  };
  return {
    kind: 'write',
    change,
    head,
    event: (seq) =>
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
    result: (seq) => ({
      status: live ? 200 : 201,
      changed: true,
      version: change.version,
      seq,
      properties: checked.properties,
      before: head,
    }),
  };
}

/** Creates, replaces or revives an object: the head is locked, `decide` makes the properties. */
export async function writeObject(app: FastifyInstance, tx: pg.PoolClient, w: ObjectWrite): Promise<ObjectWritten> {
  const { worldId, typeName, pk } = w;
  for (let attempt = 0; ; attempt++) {
    const ctx = await objectContext(tx, worldId, typeName, pk, 'FOR NO KEY UPDATE');
    const plan = await planObjectWrite(app, tx, w, ctx);
    if (plan.kind === 'unchanged') return plan.result;
    const seq = plan.head === null ? await insertHead(tx, plan.change) : await updateHead(tx, plan.change);
    if (seq === null) {
      // Another transaction created the object between our read and insert: read it again, locked.
      if (attempt < 3) continue;
      throw new StaleWriteError(`${worldId}/${typeName}/${pk} keeps being created concurrently`);
    }
    await new Outbox(tx, w.topicPrefix).add(plan.event(seq));
    return plan.result(seq);
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

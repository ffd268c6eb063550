import { Outbox, type SchemaDocument, StaleWriteError } from '@onto/shared';
import type pg from 'pg';
import { commitTime, linkChange, type Origin, objectChange } from '../events.js';
import { type LiveLink, linksTouching, lockInherited, writeLink } from '../links/repository.js';
import { insertHead, updateHead } from './heads.js';
import type { Head } from './repository.js';

export interface Tombstone {
  worldId: string;
  type: string;
  pk: string;
  /** The live head, locked FOR UPDATE by the caller. */
  head: Head;
  schemaVersion: number;
  schema: SchemaDocument;
  /** The world is a fork: links it inherited are deleted too (docs/adr/0023). */
  forked: boolean;
  origin: Origin;
  topicPrefix: string;
}

/**
 * Deletes an object the way every path does (REST, CDC): its live links first, each with its
 * own `link.deleted` event, then a tombstone head with `object.deleted`, in the caller's
 * transaction. Returns the tombstone's version and seq, and the links it deleted (as they were).
 */
export async function tombstoneObject(
  tx: pg.ClientBase,
  t: Tombstone,
): Promise<{ version: number; seq: number; removedLinks: LiveLink[] }> {
  // No row of the fork to lock for an inherited object: linkers of it hold this lock shared.
  if (t.head.inherited) await lockInherited(tx, t.worldId, { type: t.type, pk: t.pk }, true);
  const linkTypes = Object.values(t.schema.linkTypes);
  const links = await linksTouching(
    tx,
    t.worldId,
    { type: t.type, pk: t.pk },
    linkTypes.filter((l) => l.from === t.type).map((l) => l.apiName),
    linkTypes.filter((l) => l.to === t.type).map((l) => l.apiName),
    t.forked,
  );
  const writtenAt = await commitTime(tx);
  for (const link of links) {
    const change = {
      worldId: t.worldId,
      linkType: link.linkType,
      from: { type: link.fromType, pk: link.fromPk },
      to: { type: link.toType, pk: link.toPk },
      version: link.version + 1,
    };
    const seq = await writeLink(tx, {
      ...change,
      fromOne: false,
      toOne: false,
      deleted: true,
      actor: t.origin.actor,
      requestId: t.origin.requestId,
    });
    if (seq === null) throw new Error('a locked live link could not be deleted');
    await new Outbox(tx, t.topicPrefix).add(linkChange({ ...change, kind: 'deleted', seq, writtenAt }, t.origin));
  }
  const version = t.head.version + 1;
  const tombstone = {
    worldId: t.worldId,
    type: t.type,
    pk: t.pk,
    version,
    properties: null,
    schemaVersion: t.schemaVersion,
    actor: t.origin.actor,
    requestId: t.origin.requestId,
  };
  // An object a fork inherited gets the fork's own head: a tombstone that hides the base's.
  const seq = t.head.inherited ? await insertHead(tx, tombstone) : await updateHead(tx, tombstone);
  if (seq === null) throw new StaleWriteError(`${t.worldId}/${t.type}/${t.pk} was written concurrently`);
  await new Outbox(tx, t.topicPrefix).add(
    objectChange(
      {
        worldId: t.worldId,
        type: t.type,
        pk: t.pk,
        kind: 'deleted',
        version,
        seq,
        before: t.head.properties,
        after: null,
        schemaVersion: t.schemaVersion,
        writtenAt,
      },
      t.origin,
    ),
  );
  return { version, seq, removedLinks: links };
}

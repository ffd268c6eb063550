/** What the intelligence routes share: names, conditional writes, cursors, the world's transaction. */
import {
  AT_PATTERN,
  decodeCursor,
  encodeCursor,
  Headers,
  inTransaction,
  NotFound,
  PreconditionFailed,
  problemResponses,
  type Queryable,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type pg from 'pg';
import { lockWorlds } from './engine/locks.js';

export const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';
export const errors = problemResponses(400, 401, 403, 404, 409, 412, 422, 503);
/** A read that takes `?at=`: also 410 before the world's retained horizon (docs/adr/0072, 0073). */
export const readErrors = { ...errors, ...problemResponses(410) };

export const DEFINITION_IF_MATCH = { what: 'a definition version', any: true, min: 1, maxDigits: 10 } as const;

export const ReadHeaders = Type.Object({
  'x-consistency-token': Headers.consistencyToken(
    'data=<seq>, control=<schema version>: wait (bounded) until applied here',
  ),
});
export const WriteHeaders = Type.Object({
  'if-match': Headers.ifMatch(DEFINITION_IF_MATCH, 'the definition version the write is based on, or *'),
  'x-consistency-token': Headers.consistencyToken(),
});

/** If-Match against the stored definition's version: 412 with the current one when it fails. */
export function checkIfMatch(expected: number | 'any' | undefined, current: number | undefined, what: string) {
  if (expected === undefined) return;
  if (expected === 'any' ? current === undefined : current !== expected) {
    throw new PreconditionFailed(
      current === undefined ? `${what} does not exist` : `${what} is at version ${current}, not ${expected}`,
      { currentVersion: current ?? null },
    );
  }
}

export async function provisioned(db: Queryable, worldId: string): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM worlds WHERE id = $1', [worldId]);
  return (rowCount ?? 0) > 0;
}

export const notProvisioned = (world: string) => new NotFound(`world ${world} is not provisioned in intelligence`);

/**
 * A write to a world's definitions: one transaction holding the world's evaluation lock, so that
 * it never interleaves with a recompute of the world or another definition write; 404 when the
 * world is not provisioned here.
 */
export async function inWorld<T>(pool: pg.Pool, worldId: string, work: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
  return inTransaction(pool, async (tx) => {
    await lockWorlds(tx, [worldId]);
    if (!(await provisioned(tx, worldId))) throw notProvisioned(worldId);
    return work(tx);
  });
}

/** A UUID, either case: an alert's or a decision's id. */
/** `?at=` on an object read: what it takes and how each ref is answered (worlds/ref.ts). */
export const AtObject = Type.String({
  maxLength: 100,
  pattern: AT_PATTERN,
  description:
    "read at a ref: a data commit (the n of X-Consistency-Token: data=<n>, or a version's seq in data's history), an RFC 3339 instant with an offset (the last commit of the world's chain data wrote at or before it, among the writes intelligence has applied: the commit data resolves it to) or a tag of the world (its data commit: the same answer as ?at=<that commit>, here and in data). The object and its derived values as intelligence held them once it had applied the world's data up to that commit; waits, bounded, until it has (503). A tag data has not positioned yet (PENDING) waits, bounded, then 409; a name that is no tag of the world 404; an instant in the future or before the world existed, or a commit before a fork's fork point, 422; anything else 400 — each naming querystring/at.",
});

/** `?at=` on a list or a read of intelligence's own state (alerts, decisions, actions, definitions). */
export const AtState = Type.String({
  maxLength: 100,
  pattern: AT_PATTERN,
  description:
    "read as of a ref: a data commit, an RFC 3339 instant with an offset (the last commit of the world's chain data wrote at or before it, among the writes intelligence has applied) or a tag of the world (its data commit: the same answer as ?at=<that commit>). Answers what a fork of the world at that ref starts from (docs/adr/0045): the definitions of that point (from the definition history), and alerts, decisions and actions made by then, each in the state it had then. Waits, bounded, until intelligence has applied the world's data up to the commit (503). A tag data has not positioned yet (PENDING) waits, bounded, then 409; a name that is no tag of the world 404; an instant in the future or before the world existed, or a commit before a fork's fork point, 422; anything else 400 — each naming querystring/at.",
});

export const UUID = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';

/**
 * Keyset paging by id, newest first, of one listing (its filters, as text): `after` is the id the
 * cursor goes on from (400 for a cursor of another listing); `page` takes the `limit + 1` rows
 * read after it and gives the page and the next page's cursor.
 */
export function idKeyset(cursor: string | undefined, listing: string, limit: number) {
  const after = decodeCursor(cursor, (c) =>
    typeof c.i === 'string' && new RegExp(UUID).test(c.i) && c.f === listing ? c.i : undefined,
  );
  return {
    after,
    page<R extends { id: string }>(rows: R[]) {
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return { page, next: rows.length > limit && last ? encodeCursor({ i: last.id, f: listing }) : null };
    },
  };
}

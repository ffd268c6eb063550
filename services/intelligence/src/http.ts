/** What the intelligence routes share: names, conditional writes, cursors, the world's transaction. */
import {
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

/** What the intelligence routes share: names, conditional writes, cursors, the world's transaction. */
import { BadRequest, inTransaction, NotFound, PreconditionFailed, type Queryable } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type pg from 'pg';
import { lockWorlds } from './engine/locks.js';

export const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';
export const Problem = { $ref: 'Problem#' };
export const errors = {
  400: Problem,
  401: Problem,
  403: Problem,
  404: Problem,
  409: Problem,
  412: Problem,
  422: Problem,
  503: Problem,
};

export const ReadHeaders = Type.Object({
  'x-consistency-token': Type.Optional(
    Type.String({ description: 'data=<seq>, control=<schema version>: wait (bounded) until applied here' }),
  ),
});
export const WriteHeaders = Type.Object({
  'if-match': Type.Optional(Type.String({ description: 'the definition version the write is based on, or *' })),
  'x-consistency-token': Type.Optional(Type.String()),
});

/** `If-Match: "3"` (or 3, or W/"3") → 3, `*` → 'any', absent → undefined; anything else is a 400. */
export function ifMatch(request: FastifyRequest): number | 'any' | undefined {
  const raw = request.headers['if-match'];
  if (raw === undefined) return undefined;
  const text = String(raw).trim();
  if (text === '*') return 'any';
  const value = text.replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
  if (!/^[1-9][0-9]{0,9}$/.test(value)) {
    throw new BadRequest('If-Match must be a definition version, such as "3", or *', [
      { path: 'header/if-match', message: 'must be a quoted version or *' },
    ]);
  }
  return Number(value);
}

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

export const actorOf = (request: FastifyRequest) => request.principal?.userId ?? 'anonymous';

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

export { decodeCursor, encodeCursor } from '@onto/shared';

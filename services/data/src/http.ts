import {
  actorOf,
  advisoryLockKey,
  BadRequest,
  ConcurrencyConflictError,
  Conflict,
  ifMatch,
  inTransaction,
  lockSpace,
  PreconditionFailed,
  requestHeader,
  traceparentOf,
  UUID_V7,
  withOcc,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { Origin } from './events.js';
import { LIMITS, stringFault } from './objects/model.js';

/** `If-None-Match: *`: create only. Other forms are for reads and refused on writes. */
export function ifNoneMatchAny(request: FastifyRequest): boolean {
  const raw = requestHeader(request, 'if-none-match');
  if (raw === undefined) return false;
  if (raw === '*') return true;
  throw new BadRequest('a write accepts only If-None-Match: *', [
    { path: 'header/if-none-match', message: 'must be *' },
  ]);
}

/** How the OpenAPI documents describe `X-Caused-By`. */
export const CAUSED_BY_HEADER =
  'the event (UUIDv7) the client says caused this write: carried as the x-caused-by header of its change events, for tracing; no consumer waits for it';

/**
 * `X-Caused-By`: the id (UUIDv7) of the event the client says caused this request. It travels
 * with the request's events as the `x-caused-by` record header, not as their `caused_by`: data
 * cannot tell an event onto issued from any UUIDv7, and a consumer waiting for a cause that never
 * comes would hold the write back (docs/adr/0057).
 */
export function claimedCause(request: FastifyRequest): string | null {
  const raw = requestHeader(request, 'x-caused-by');
  if (raw === undefined || raw === '') return null;
  const id = raw.toLowerCase();
  if (!UUID_V7.test(id)) {
    throw new BadRequest('X-Caused-By must be an event id (a UUIDv7)', [
      { path: 'header/x-caused-by', message: 'must be a UUIDv7' },
    ]);
  }
  return id;
}

/**
 * A primary key in a path, as the documents state it: 1 to LIMITS.pkLength characters of text
 * PostgreSQL can store — no NUL, no lone surrogate (the pattern is a Unicode one, as Ajv compiles
 * it), which is what `keyParam` enforces.
 */
export const PK_PATTERN = '^[^\\u0000\\uD800-\\uDFFF]+$';
export const Pk = (description = 'the primary key, URL-encoded') =>
  Type.String({ minLength: 1, maxLength: LIMITS.pkLength, pattern: PK_PATTERN, description });

/** A primary key from the path: text PostgreSQL can store (no NUL, no lone surrogate), not too long. */
export function keyParam(name: string, value: string): string {
  const fault = stringFault(value, LIMITS.pkLength);
  if (fault) throw new BadRequest(`the ${name} ${fault}`, [{ path: `params/${name}`, message: fault }]);
  return value;
}

/** What a write answers: the object's version as ETag and data's sequence as the consistency token. */
export function written(reply: FastifyReply, version: number, seq: number) {
  reply.header('etag', `"${version}"`).header('x-consistency-token', `data=${seq}`);
}

/** Who acts, under which request, caused by which event: what every change event carries. */
export const originOf = (request: FastifyRequest): Origin => {
  const traceparent = traceparentOf();
  return {
    actor: actorOf(request),
    requestId: String(request.id),
    causedBy: null,
    claimedCause: claimedCause(request),
    ...(traceparent ? { traceparent } : {}),
  };
};

/** What an object's or a link's If-Match may name. */
export const OBJECT_IF_MATCH = { what: 'an object version', any: true, min: 1, maxDigits: 15 } as const;

export interface Preconditions {
  ifMatch: number | 'any' | undefined;
  createOnly: boolean;
}

/** The write's If-Match / If-None-Match, read (and refused when malformed) before any work. */
export const preconditionsOf = (request: FastifyRequest): Preconditions => ({
  ifMatch: ifMatch(request, OBJECT_IF_MATCH),
  createOnly: ifNoneMatchAny(request),
});

/**
 * Preconditions against the current head (an object's or a link's); 412 with the current version
 * (null when there is none) when they fail.
 */
export function checkPreconditions(
  conditions: Preconditions,
  head: { version: number; deleted: boolean } | null,
  what: string,
): void {
  const expected = conditions.ifMatch;
  const live = head !== null && !head.deleted;
  const current = live ? head.version : null;
  if (conditions.createOnly && live) {
    throw new PreconditionFailed(`${what} exists (version ${current})`, { currentVersion: current });
  }
  if (expected === undefined) return;
  if (expected === 'any' ? !live : current !== expected) {
    throw new PreconditionFailed(
      live ? `${what} is at version ${current}, not ${expected}` : `${what} does not exist`,
      {
        currentVersion: current,
      },
    );
  }
}

// Advisory lock namespace of worlds: writes hold it shared, dropping a world exclusively.
export const WORLD_LOCK_SPACE = lockSpace('wrld');

/** A world's advisory lock key in WORLD_LOCK_SPACE. */
export const worldLockKey = advisoryLockKey;

/** The same as one SQL text (no parameters: both numbers are computed here), sent with BEGIN. */
export const worldLockSharedSql = (worldId: string) =>
  `SELECT pg_advisory_xact_lock_shared(${WORLD_LOCK_SPACE}, ${worldLockKey(worldId)})`;

/** Takes the world's drop lock exclusively: every write in flight in the world ends first. */
export async function lockWorldForDrop(tx: pg.ClientBase, worldId: string): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock($1, $2)', [WORLD_LOCK_SPACE, worldLockKey(worldId)]);
}

/** Takes the world's drop lock shared in the caller's transaction, as every write does. */
export async function lockWorldShared(tx: pg.ClientBase, worldId: string): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock_shared($1, $2)', [WORLD_LOCK_SPACE, worldLockKey(worldId)]);
}

/**
 * Runs `work` in a READ COMMITTED transaction that holds the world's drop lock shared, so that
 * the world cannot be dropped under the write (and a dropped world's check fails afterwards).
 * Deadlocks are retried; a conflict that outlasts the retries is a 409. Shared advisory locks
 * never wait for each other: writes of a world do not serialise on it.
 */
export async function inWorldTransaction<T>(
  pool: pg.Pool,
  worldId: string,
  work: (tx: pg.PoolClient) => Promise<T>,
): Promise<T> {
  // One round trip with BEGIN.
  return retryWriteConflicts(() => inTransaction(pool, work, 'READ COMMITTED', worldLockSharedSql(worldId)));
}

/** Runs a write's transaction again on conflicts, thrice from 20 ms; one that outlasts them is a 409. */
export async function retryWriteConflicts<T>(once: () => Promise<T>): Promise<T> {
  try {
    return await withOcc(once, { maxRetries: 3, baseDelayMs: 20 });
  } catch (error) {
    if (error instanceof ConcurrencyConflictError) {
      throw new Conflict('the write kept conflicting with concurrent writes; retry it');
    }
    throw error;
  }
}

import { actorOf, BadRequest, ifMatch, PreconditionFailed, requestHeader, traceparentOf, UUID_V7 } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Origin } from '../events.js';
import { LIMITS, stringFault } from '../objects/model.js';

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

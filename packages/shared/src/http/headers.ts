import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { BadRequest } from '../errors/problem.js';

/** A request header's value, trimmed; undefined when absent. */
export function requestHeader(request: FastifyRequest, name: string): string | undefined {
  const raw = Object.hasOwn(request.headers, name) ? request.headers[name] : undefined;
  return raw === undefined ? undefined : String(raw).trim();
}

/** What a route's `If-Match` may name. */
export interface IfMatchRule {
  /** What the version counts, for the 400: 'an object version'. */
  what: string;
  /** Whether `*` (whatever version is current) is accepted. */
  any: boolean;
  /** The lowest version: 0 where "0" means "nothing written yet". */
  min: 0 | 1;
  /** The most digits a version has. */
  maxDigits: number;
}

/** One spelling per version: an entity tag is compared as written, so "03" is not version 3. */
function versionDigits(rule: IfMatchRule): string {
  const rest = `[0-9]{0,${rule.maxDigits - 1}}`;
  return rule.min === 0 ? `(?:0|[1-9]${rest})` : `[1-9]${rest}`;
}

/** The pattern `ifMatch` enforces, as the OpenAPI documents state it: "3", 3, W/"3" (and * where accepted). */
export function ifMatchPattern(rule: IfMatchRule): string {
  const digits = versionDigits(rule);
  return `^(?:${rule.any ? '\\*|' : ''}(?:W/)?(?:"${digits}"|${digits}))$`;
}

/**
 * `If-Match: "3"` (or 3, or W/"3") → 3, `*` → 'any' where the rule accepts it, absent →
 * undefined; anything else is a 400 naming the header.
 */
export function ifMatch(request: FastifyRequest, rule: IfMatchRule & { any: true }): number | 'any' | undefined;
export function ifMatch(request: FastifyRequest, rule: IfMatchRule & { any: false }): number | undefined;
export function ifMatch(request: FastifyRequest, rule: IfMatchRule): number | 'any' | undefined {
  const raw = requestHeader(request, 'if-match');
  if (raw === undefined) return undefined;
  if (raw === '*' && rule.any) return 'any';
  if (!new RegExp(ifMatchPattern(rule)).test(raw)) {
    const or = rule.any ? ', or *' : '';
    throw new BadRequest(`If-Match must be ${rule.what}, such as "3"${or}`, [
      { path: 'header/if-match', message: `must be a quoted version${rule.any ? ' or *' : ''}` },
    ]);
  }
  return Number(raw.replace(/^W\//, '').replace(/^"(.*)"$/, '$1'));
}

/** `X-Consistency-Token`: service=version pairs separated by `,` or `;` (empty: none). */
const TOKEN_PAIR = '\\s*(?:[a-z]+lsn=[0-9]{1,20}|[a-z]+=[0-9]{1,15})\\s*';
export const CONSISTENCY_TOKEN_PATTERN = `^(?:${TOKEN_PAIR}(?:[,;]${TOKEN_PAIR})*)?$`;
/** `X-Caused-By`: an event id, a UUIDv7 in either case (empty: none). */
export const CAUSED_BY_PATTERN =
  '^(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-7[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12})?$';
/** `Idempotency-Key`: 1 to 255 printable ASCII characters, bare or as a quoted sf-string. */
export const IDEMPOTENCY_KEY_PATTERN = '^(?:"[\\x20-\\x7e]{1,255}"|(?!"[\\x20-\\x7e]*"$)[\\x20-\\x7e]{1,255})$';

/**
 * The request headers as the OpenAPI documents state them: each schema carries the pattern its
 * parser enforces, so a generated client (and the fuzzer) knows what the service accepts.
 */
export const Headers = {
  consistencyToken: (description = 'service=version pairs (data=17, control=4): wait (bounded) until applied here') =>
    Type.Optional(Type.String({ pattern: CONSISTENCY_TOKEN_PATTERN, description })),
  causedBy: (description = 'the event (a UUIDv7) that caused this request') =>
    Type.Optional(Type.String({ pattern: CAUSED_BY_PATTERN, description })),
  ifMatch: (rule: IfMatchRule, description: string) =>
    Type.Optional(Type.String({ pattern: ifMatchPattern(rule), description })),
  ifNoneMatchAny: () => Type.Optional(Type.String({ pattern: '^\\*$', description: '* creates only' })),
  idempotencyKey: () =>
    Type.String({
      pattern: IDEMPOTENCY_KEY_PATTERN,
      description: 'a unique string per request, such as a UUID: 1 to 255 printable ASCII characters, bare or quoted',
    }),
};

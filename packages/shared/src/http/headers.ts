import type { FastifyRequest } from 'fastify';
import { BadRequest } from './problem.js';

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
  const value = raw.replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
  // One spelling per version: an entity tag is compared as written, so "03" is not version 3.
  const digits = new RegExp(`^(?:0|[1-9][0-9]{0,${rule.maxDigits - 1}})$`);
  if (!digits.test(value) || Number(value) < rule.min) {
    const or = rule.any ? ', or *' : '';
    throw new BadRequest(`If-Match must be ${rule.what}, such as "3"${or}`, [
      { path: 'header/if-match', message: `must be a quoted version${rule.any ? ' or *' : ''}` },
    ]);
  }
  return Number(value);
}

import { BadRequest } from '@onto/shared';
import type { FastifyRequest } from 'fastify';

/** `If-Match: "3"` (or 3, or W/"3") → 3; absent → undefined; anything else is a 400. */
export function ifMatchVersion(request: FastifyRequest): number | undefined {
  const raw = request.headers['if-match'];
  if (raw === undefined) return undefined;
  const value = String(raw)
    .trim()
    .replace(/^W\//, '')
    .replace(/^"(.*)"$/, '$1');
  if (!/^\d{1,9}$/.test(value)) {
    throw new BadRequest('If-Match must be a version, such as "3"', [
      { path: 'header/if-match', message: 'must be a quoted integer version' },
    ]);
  }
  return Number(value);
}

/** Who is acting, for authorship and the audit log. */
export const actorOf = (request: FastifyRequest) => request.principal?.userId ?? 'anonymous';

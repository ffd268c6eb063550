import type { FastifyRequest } from 'fastify';
import { BadRequest } from './problem.js';

const header = (request: FastifyRequest, name: string): string | undefined => {
  const raw = request.headers[name];
  return raw === undefined ? undefined : String(raw).trim();
};

/** `X-Consistency-Token: control=4, data=17`: the versions the caller has seen, by service. */
export function consistencyToken(request: FastifyRequest): Partial<Record<string, number>> {
  const raw = header(request, 'x-consistency-token');
  if (raw === undefined || raw === '') return {};
  const token: Record<string, number> = {};
  for (const part of raw.split(/[,;]/)) {
    const m = /^\s*([a-z]+)=([0-9]{1,15})\s*$/.exec(part);
    if (!m?.[1] || !m[2]) {
      throw new BadRequest('X-Consistency-Token must be service=version pairs, such as control=4', [
        { path: 'header/x-consistency-token', message: 'must be service=version[, service=version]' },
      ]);
    }
    token[m[1]] = Number(m[2]);
  }
  return token;
}

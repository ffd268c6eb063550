import type { FastifyRequest } from 'fastify';
import { type Backoff, backoffDelay } from '../backoff.js';
import { BadRequest, Unavailable } from '../errors/problem.js';
import { requestHeader } from './headers.js';

/** `X-Consistency-Token: control=4, data=17`: the versions the caller has seen, by service. */
export function consistencyToken(request: FastifyRequest): Partial<Record<string, number>> {
  const raw = requestHeader(request, 'x-consistency-token');
  if (raw === undefined || raw === '') return {};
  // Service names are the caller's text (`constructor=4` parses): a null-prototype record holds them as data.
  const token: Record<string, number> = Object.create(null);
  for (const part of raw.split(/[,;]/)) {
    // `<service>lsn=<bytes>`: a WAL position (docs/adr/0080), read by walPositionOf, not here.
    if (/^\s*[a-z]+lsn=[0-9]{1,20}\s*$/.test(part)) continue;
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

/**
 * Polls `probe` with a growing interval until it reaches `wanted`, at most `boundMs`; then 503
 * with Retry-After naming what is behind.
 */
export async function awaitApplied(
  probe: () => Promise<number>,
  wanted: number,
  options: { boundMs: number; poll: Backoff },
  behind: (have: number) => string,
): Promise<number> {
  const deadline = Date.now() + options.boundMs;
  for (let attempt = 0; ; attempt++) {
    const have = await probe();
    if (have >= wanted) return have;
    const left = deadline - Date.now();
    if (left <= 0) throw new Unavailable(behind(have), Math.max(1, Math.ceil(options.boundMs / 1000)));
    await new Promise((resolve) => setTimeout(resolve, Math.min(backoffDelay(attempt, options.poll), left)));
  }
}

/**
 * What `?at=` takes in data's and intelligence's reads (docs/adr/0023, 0046, 0069): a data commit
 * (at most 15 digits), an RFC 3339 instant with an offset, or a tag name (control's TAG_NAME)
 * that is neither.
 */
export const AT_PATTERN =
  '^(?:[0-9]{1,15}|[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])|(?![0-9]+$)(?![0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ])[a-zA-Z0-9][a-zA-Z0-9._-]{0,99})$';

const INSTANT_FIELDS = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-](\d{2}):(\d{2}))$/;

/**
 * The time of an RFC 3339 instant with an offset, in ms, or undefined when `raw` is none — a day
 * its month does not have (2026-02-30) included, which JavaScript would roll over and PostgreSQL
 * would refuse.
 */
export function instantTime(raw: string): number | undefined {
  const m = INSTANT_FIELDS.exec(raw);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as number[];
  const date = new Date(Date.UTC(year as number, (month as number) - 1, day));
  if (date.getUTCMonth() !== (month as number) - 1 || date.getUTCDate() !== day) return undefined;
  if ((hour as number) > 23 || (minute as number) > 59 || (second as number) > 59) return undefined;
  if (m[9] !== undefined && (Number(m[9]) > 23 || Number(m[10]) > 59)) return undefined;
  const time = Date.parse(raw);
  return Number.isNaN(time) ? undefined : time;
}

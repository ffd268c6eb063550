import type { FieldError } from '@onto/shared';

/**
 * What an event offers a filter: an object change's properties (after the change, before it for a
 * deletion), else the event's payload itself (an alert's fields, say).
 */
export function filterSubject(payload: unknown): Record<string, unknown> {
  if (!isRecord(payload)) return {};
  const props = payload.after ?? payload.before;
  return isRecord(props) ? props : payload;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

export type EventFilter = (subject: Record<string, unknown>) => boolean;

const OPS = ['eq', 'ne', 'gt', 'gte', 'lt', 'lte'] as const;
type Op = (typeof OPS)[number];

/** `amount:gte:100`'s value: a JSON number, boolean or null as such, anything else as a string. */
function literal(text: string): unknown {
  if (text === 'true') return true;
  if (text === 'false') return false;
  if (text === 'null') return null;
  if (/^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$/.test(text) && Number.isFinite(Number(text))) return Number(text);
  return text;
}

function compare(op: Op, actual: unknown, expected: unknown): boolean {
  if (op === 'eq') return actual === expected;
  if (op === 'ne') return actual !== expected;
  if (typeof actual !== typeof expected || (typeof actual !== 'number' && typeof actual !== 'string')) return false;
  const a = actual as number | string;
  const e = expected as number | string;
  return op === 'gt' ? a > e : op === 'gte' ? a >= e : op === 'lt' ? a < e : a <= e;
}

/**
 * The one place a subscription's or a webhook's `where` becomes a predicate over an event. For now
 * the simple property filter data's lists take (`<property>:<eq|ne|gt|gte|lt|lte>:<value>`, all of
 * them must hold); the object-set where-clause can be accepted here later without the callers
 * changing. `path` names the field in errors.
 */
export function compileEventFilter(where: readonly string[], path: string): EventFilter | { errors: FieldError[] } {
  const clauses: { property: string; op: Op; value: unknown }[] = [];
  const errors: FieldError[] = [];
  for (const [i, raw] of where.entries()) {
    const at = where.length === 1 ? path : `${path}/${i}`;
    const first = raw.indexOf(':');
    const second = raw.indexOf(':', first + 1);
    if (first <= 0 || second < 0) {
      errors.push({ path: at, message: 'must be <property>:<eq|ne|gt|gte|lt|lte>:<value>' });
      continue;
    }
    const op = raw.slice(first + 1, second) as Op;
    if (!OPS.includes(op)) {
      errors.push({ path: at, message: `unknown operator ${JSON.stringify(op)}; use eq, ne, gt, gte, lt or lte` });
      continue;
    }
    clauses.push({ property: raw.slice(0, first), op, value: literal(raw.slice(second + 1)) });
  }
  if (errors.length > 0) return { errors };
  return (subject) =>
    clauses.every((c) => compare(c.op, Object.hasOwn(subject, c.property) ? subject[c.property] : undefined, c.value));
}

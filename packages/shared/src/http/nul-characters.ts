import type { FastifyRequest } from 'fastify';
import { BadRequest, type FieldError } from './problem.js';

/** Where `value` holds a NUL character (in a string or a key), as a JSON pointer under `root`. */
export function nulCharacterPath(value: unknown, root: string): string | undefined {
  // A stack, not recursion: a body may nest as deep as its size allows.
  const stack: [unknown, string][] = [[value, root]];
  while (stack.length) {
    const [item, path] = stack.pop() as [unknown, string];
    if (typeof item === 'string') {
      if (item.includes('\u0000')) return path || '/';
    } else if (isParsedJson(item)) {
      for (const [key, child] of Object.entries(item)) {
        const childPath = `${path}/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`;
        if (key.includes('\u0000')) return childPath;
        stack.push([child, childPath]);
      }
    }
  }
  return undefined;
}

/**
 * PostgreSQL stores no NUL in text or jsonb: a request carrying one is refused here, naming the
 * field, rather than failing in the database with a 500.
 */
export async function refuseNulCharacters(request: FastifyRequest): Promise<void> {
  const errors: FieldError[] = [];
  for (const [part, value] of [
    ['body', request.body],
    ['querystring', request.query],
    ['params', request.params],
  ] as const) {
    const path = nulCharacterPath(value, part);
    if (path) errors.push({ path, message: 'must not contain a NUL character (\\u0000)' });
  }
  if (errors.length) throw new BadRequest(errors.map((e) => `${e.path} ${e.message}`).join('; '), errors);
}

/** Arrays and plain objects only: a streamed body (bulk NDJSON) is read by its route, not here. */
function isParsedJson(item: unknown): item is object {
  if (typeof item !== 'object' || item === null) return false;
  const proto = Object.getPrototypeOf(item);
  // Object.prototype, or none: the query parser's objects have a prototype whose own is null.
  return Array.isArray(item) || proto === null || Object.getPrototypeOf(proto) === null;
}

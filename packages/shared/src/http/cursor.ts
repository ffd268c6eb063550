import { BadRequest } from '../errors/problem.js';

/** An opaque page cursor: base64url of JSON, so that clients do not build or read it. */
export const encodeCursor = (position: Record<string, unknown>): string =>
  Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');

/** Decodes a cursor this service issued; anything else is a 400 naming the query parameter. */
export function decodeCursor<T>(
  raw: string | undefined,
  check: (v: Record<string, unknown>) => T | undefined,
): T | null {
  if (raw === undefined) return null;
  let position: unknown;
  try {
    position = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    position = undefined;
  }
  const checked =
    typeof position === 'object' && position !== null && !Array.isArray(position)
      ? check(position as Record<string, unknown>)
      : undefined;
  if (checked === undefined) {
    throw new BadRequest('the cursor is not one this listing issued', [
      { path: 'querystring/cursor', message: 'must be the `next` of a previous page of the same listing' },
    ]);
  }
  return checked;
}

import type { FastifyInstance, FastifyRequest } from 'fastify';
import { BadRequest } from '../errors/problem.js';

/**
 * How deep arrays and objects may nest in a JSON body or line (docs/adr/0036). No onto document
 * comes near it; a body nested 20,000 deep overflowed the stack of code that walks values
 * recursively (validation, canonical JSON, CEL) and answered 500.
 */
export const JSON_MAX_DEPTH = 64;

const OPEN_OBJECT = 0x7b; // {
const OPEN_ARRAY = 0x5b; // [
const CLOSE_OBJECT = 0x7d; // }
const CLOSE_ARRAY = 0x5d; // ]
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \

/**
 * The offset of the bracket that opens level `max + 1` of `text`, or -1 when no array or object
 * nests deeper than `max`. One pass over the text, brackets inside strings ignored; the text need
 * not be valid JSON (the parser that runs after it says what else is wrong).
 */
export function jsonTooDeepAt(text: string, max = JSON_MAX_DEPTH): number {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > max) return i;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) depth--;
  }
  return -1;
}

/** The message of a value nested too deep, as a body's problem and a bulk line's error say it. */
export const TOO_DEEP = `nests arrays and objects deeper than ${JSON_MAX_DEPTH} levels (the limit of every onto JSON body)`;

/**
 * JSON.parse of one line or document, refusing one nested deeper than JSON_MAX_DEPTH first
 * (a SyntaxError, as a malformed line is), so that nothing recursive ever sees it.
 */
export function parseBoundedJson(text: string): unknown {
  const at = jsonTooDeepAt(text);
  if (at >= 0) throw new SyntaxError(`${TOO_DEEP}: level ${JSON_MAX_DEPTH + 1} opens at offset ${at}`);
  return JSON.parse(text);
}

/**
 * Replaces Fastify's JSON body parsers (`application/json` and, where a service takes it,
 * `application/merge-patch+json`) by its own default parser behind the depth check: a body nested
 * deeper than JSON_MAX_DEPTH is a 400 problem before any hook that reads the body or any handler runs.
 */
export function installBoundedJsonParser(app: FastifyInstance, contentType = 'application/json'): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  if (app.hasContentTypeParser(contentType)) app.removeContentTypeParser(contentType);
  app.addContentTypeParser(
    contentType,
    { parseAs: 'string' },
    (request: FastifyRequest, body: string | Buffer, done: (err: Error | null, body?: unknown) => void) => {
      const text = typeof body === 'string' ? body : body.toString('utf8');
      const at = jsonTooDeepAt(text);
      if (at >= 0) {
        done(
          new BadRequest(`the request body ${TOO_DEEP}: level ${JSON_MAX_DEPTH + 1} opens at offset ${at}`, [
            { path: '/', message: TOO_DEEP },
          ]),
        );
        return;
      }
      parse(request, text, done);
    },
  );
}

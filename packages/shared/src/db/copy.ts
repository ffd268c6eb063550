import { once } from 'node:events';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';

/** Bytes of COPY data handed to the socket at once: few writes, each one costs. */
const COPY_CHUNK = 1 << 20;

const COPY_SPECIAL = /[\\\t\n\r]/;
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/** A field of COPY's text format: backslash, tab, newline and carriage return escaped. */
export const copyField = (s: string): string =>
  COPY_SPECIAL.test(s) ? s.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c] ?? c) : s;

/**
 * Streams lines of COPY text (fields escaped with copyField, each line ending in a newline) into
 * `target` ("table (columns)"), in chunks of 1 MB as they are made, in the caller's transaction.
 * Should making a line throw, the COPY is abandoned (CopyFail) so that the transaction can roll
 * back, and the error is rethrown.
 */
export async function copyLines(tx: pg.ClientBase, target: string, lines: Iterable<string>): Promise<void> {
  const stream = tx.query(copyFrom(`COPY ${target} FROM STDIN`));
  let chunk = '';
  try {
    for (const line of lines) {
      chunk += line;
      if (chunk.length >= COPY_CHUNK) {
        if (!stream.write(chunk)) await once(stream, 'drain');
        chunk = '';
      }
    }
  } catch (error) {
    stream.destroy(error as Error);
    await once(stream, 'close').catch(() => {});
    throw error;
  }
  stream.end(chunk);
  await once(stream, 'finish');
}

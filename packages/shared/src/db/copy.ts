import { once } from 'node:events';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';

/** Bytes of COPY data handed to the socket at once: few writes, each one costs. */
const COPY_CHUNK = 1 << 20;

const COPY_SPECIAL = /[\\\t\n\r]/;
const COPY_ESCAPES = new Map([
  ['\\', '\\\\'],
  ['\t', '\\t'],
  ['\n', '\\n'],
  ['\r', '\\r'],
]);

/** A field of COPY's text format: backslash, tab, newline and carriage return escaped. */
export const copyField = (s: string): string =>
  COPY_SPECIAL.test(s) ? s.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES.get(c) ?? c) : s;

/**
 * Streams COPY text into `target` ("table (columns)") in the caller's transaction. `pieces` are
 * the text in order: lines, or parts of lines (fields escaped with copyField, each line ending in
 * a newline), as strings or as bytes already UTF-8. They are encoded straight into 1 MB buffers
 * as they come, which go to the socket while the rest is made: building the text as one string
 * first cost more in flattening, UTF-8 conversion and garbage collection than PostgreSQL took to
 * parse it. Should making a piece throw, the COPY is abandoned (CopyFail) so that the transaction
 * can roll back, and the error is rethrown.
 */
export async function copyLines(tx: pg.ClientBase, target: string, pieces: Iterable<string | Buffer>): Promise<void> {
  const stream = tx.query(copyFrom(`COPY ${target} FROM STDIN`));
  let buffer = Buffer.allocUnsafe(COPY_CHUNK);
  let used = 0;
  const flush = async () => {
    if (used === 0) return;
    const full = buffer.subarray(0, used);
    buffer = Buffer.allocUnsafe(COPY_CHUNK);
    used = 0;
    if (!stream.write(full)) await once(stream, 'drain');
  };
  try {
    for (const piece of pieces) {
      if (typeof piece !== 'string') {
        // Bytes already encoded: copied into the chunk, or sent as they are when larger.
        if (used + piece.length > COPY_CHUNK) await flush();
        if (piece.length > COPY_CHUNK) {
          if (!stream.write(piece)) await once(stream, 'drain');
        } else used += piece.copy(buffer, used);
        continue;
      }
      // At most 3 bytes of UTF-8 per UTF-16 unit.
      if (used + piece.length * 3 > COPY_CHUNK) {
        await flush();
        if (piece.length * 3 > COPY_CHUNK) {
          if (!stream.write(Buffer.from(piece))) await once(stream, 'drain');
          continue;
        }
      }
      used += buffer.write(piece, used);
    }
  } catch (error) {
    stream.destroy(error as Error);
    await once(stream, 'close').catch(() => {});
    throw error;
  }
  stream.end(buffer.subarray(0, used));
  await once(stream, 'finish');
}

import { StringDecoder } from 'node:string_decoder';
import { PayloadTooLarge } from '@onto/shared';

export interface LineLimits {
  /** Bytes of the whole body; more is a 413. */
  maxBytes: number;
  /** Bytes of one line; more is a 413, before the rest of the line is read. */
  maxLineBytes: number;
}

/**
 * The complete lines of an NDJSON body, a chunk's worth at a time, as the body arrives: only the
 * chunk in hand and an unfinished line are ever held (413 past either limit).
 */
export async function* ndjsonLines(body: AsyncIterable<Buffer>, limits: LineLimits): AsyncGenerator<string[]> {
  const decoder = new StringDecoder('utf8');
  let carry = '';
  let lines = 0;
  let bytes = 0;
  const tooLong = () => new PayloadTooLarge(`line ${lines + 1} is longer than ${limits.maxLineBytes} bytes`);
  for await (const chunk of body) {
    bytes += chunk.length;
    if (bytes > limits.maxBytes) throw new PayloadTooLarge(`the body is longer than ${limits.maxBytes} bytes`);
    const text = carry + decoder.write(chunk);
    const complete: string[] = [];
    let start = 0;
    for (let end = text.indexOf('\n'); end !== -1; end = text.indexOf('\n', start)) {
      if (end - start > limits.maxLineBytes) throw tooLong();
      complete.push(text.slice(start, end));
      lines++;
      start = end + 1;
    }
    carry = text.slice(start);
    if (carry.length > limits.maxLineBytes) throw tooLong();
    if (complete.length > 0) yield complete;
  }
  carry += decoder.end();
  if (carry !== '') yield [carry];
}

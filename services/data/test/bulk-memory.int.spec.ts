import { request } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';

const MB = 1024 * 1024;
const W = 'bulkmem';
const OBJECTS = 100_000;
/** The stated bound on data's resident memory growth during one authenticated 100,000-object bulk write. */
const BOUND_MB = 200;
/** The stated bound for a 200 MB body of large objects (the body read whole grew data by 719 MB). */
const LARGE_BOUND_MB = 600;

const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string' },
    amount: { type: 'integer', indexed: true },
    status: { type: { type: 'enum', values: ['open', 'closed'] } },
  },
};

/** The body's lines, made as they are sent: the client holds one line at a time. */
function* lines(n: number, nameLength = 0, from = 0) {
  for (let i = from; i < from + n; i++) {
    const id = `item-${i}`;
    const name = nameLength > 0 ? `${id} `.padEnd(nameLength, 'n') : `item ${id}`;
    yield `${JSON.stringify({ properties: { id, name, amount: i, status: i % 2 ? 'open' : 'closed' } })}\n`;
  }
}

/** Data's resident memory before and at its peak while `work` runs, in MB. */
async function rssDuring(work: () => Promise<unknown>) {
  global.gc?.();
  const before = process.memoryUsage().rss;
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 10);
  try {
    await work();
  } finally {
    clearInterval(sampler);
  }
  peak = Math.max(peak, process.memoryUsage().rss);
  return { before: before / MB, peak: peak / MB, growth: (peak - before) / MB };
}

/** POSTs an NDJSON body streamed from `body`; the status and the answer's text. */
function post(
  port: number,
  token: string,
  body: Iterable<string>,
  path = `/v1/worlds/${W}/bulk/Item`,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path,
        headers: { 'content-type': 'application/x-ndjson', authorization: `Bearer ${token}` },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    pipeline(Readable.from(body), req).catch(() => {});
  });
}

describe('an authenticated bulk body', () => {
  let s: Stack;
  let editor: string;
  let port: number;

  beforeAll(async () => {
    // data keeps the live topics' recent events in memory for SSE (docs/adr/0059), at most
    // LIVE_REPLAY_BYTES (32 MiB by default): the growth measured here includes that ring, full.
    s = await dataStack();
    await s.world(W, { objectTypes: { Item } });
    editor = await s.user('bulk-mem-ed', W, 'editor');
    await s.data.app.listen({ port: 0, host: '127.0.0.1' });
    const address = s.data.app.server.address();
    if (!address || typeof address === 'string') throw new Error('data is not listening');
    port = address.port;
  }, 120_000);
  afterAll(async () => s?.close());

  it(`of ${OBJECTS} objects is read as a stream: data's resident memory grows by less than ${BOUND_MB} MB`, async () => {
    let res = { status: 0, text: '' };
    const { before, peak, growth } = await rssDuring(async () => {
      res = await post(port, editor, lines(OBJECTS));
    });
    console.log(
      `RSS ${before.toFixed(0)} MB before, ${peak.toFixed(0)} MB at peak: +${growth.toFixed(0)} MB for ${OBJECTS} objects`,
    );
    expect(res.status, res.text).toBe(200);
    expect(JSON.parse(res.text)).toMatchObject({ created: OBJECTS, updated: 0, unchanged: 0 });
    expect(growth).toBeLessThan(BOUND_MB);
  }, 300_000);

  it(`of 200 MB (40,000 objects of 5 KB) grows data by less than ${LARGE_BOUND_MB} MB: the body is never held whole`, async () => {
    let res = { status: 0, text: '' };
    const { before, peak, growth } = await rssDuring(async () => {
      res = await post(port, editor, lines(40_000, 5_000, OBJECTS));
    });
    console.log(
      `RSS ${before.toFixed(0)} MB before, ${peak.toFixed(0)} MB at peak: +${growth.toFixed(0)} MB for 200 MB of NDJSON`,
    );
    expect(res.status, res.text).toBe(200);
    expect(growth).toBeLessThan(LARGE_BOUND_MB);
  }, 300_000);

  it('refuses with 413 a line longer than an object may be, without reading on', async () => {
    const long = `${JSON.stringify({ properties: { id: 'long', name: 'x'.repeat(1024 * 1024) } })}\n`;
    const res = await post(port, editor, [long, ...lines(10)]);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.text)).toMatchObject({
      status: 413,
      detail: expect.stringMatching(/^line 1 is longer than/),
    });
  });

  it('refuses with 413 a time series bulk line longer than a point may be', async () => {
    const long = `${JSON.stringify({ type: 'Item', pk: 'a', series: 's', time: 'x'.repeat(70 * 1024) })}\n`;
    const res = await post(port, editor, [long], `/v1/worlds/${W}/series`);
    expect(res.status, res.text).toBe(413);
    expect(JSON.parse(res.text)).toMatchObject({
      status: 413,
      detail: expect.stringMatching(/^line 1 is longer than/),
    });
  });
});

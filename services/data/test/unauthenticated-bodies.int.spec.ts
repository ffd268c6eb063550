import { request } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';

const MB = 1024 * 1024;
const LINE = Buffer.from(`${JSON.stringify({ properties: { id: 'x'.repeat(40), name: 'y'.repeat(200) } })}\n`);

/** `size` bytes of NDJSON, made as they are sent: the client holds one line at a time. */
function* ndjson(size: number) {
  for (let sent = 0; sent < size; sent += LINE.length) yield LINE;
}

/** POSTs `size` bytes with no credentials; the status, once the server answered and the body went. */
function post(port: number, size: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v1/worlds/w/bulk/Supplier',
        headers: {
          'content-type': 'application/x-ndjson',
          'content-length': String(Math.ceil(size / LINE.length) * LINE.length),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          // Answered: the rest of the body need not go.
          req.destroy();
          resolve(res.statusCode ?? 0);
        });
      },
    );
    req.on('error', reject);
    // The server may answer and close before the whole body is sent.
    pipeline(Readable.from(ndjson(size)), req).catch(() => {});
  });
}

describe('bodies of unauthenticated requests', () => {
  let s: Stack;

  beforeAll(async () => {
    s = await dataStack();
    await s.data.app.listen({ port: 0, host: '127.0.0.1' });
  }, 120_000);
  afterAll(async () => s?.close());

  it('are never read: four concurrent 100 MB bulk bodies grow the process by less than 50 MB', async () => {
    const address = s.data.app.server.address();
    if (!address || typeof address === 'string') throw new Error('data is not listening');
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 10);
    const statuses = await Promise.all([1, 2, 3, 4].map(() => post(address.port, 100 * MB)));
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().rss);
    const growth = (peak - before) / MB;
    console.log(
      `RSS ${(before / MB).toFixed(0)} MB before, ${(peak / MB).toFixed(0)} MB at peak: +${growth.toFixed(0)} MB`,
    );
    expect(statuses).toEqual([401, 401, 401, 401]);
    expect(growth).toBeLessThan(50);
  }, 120_000);
});

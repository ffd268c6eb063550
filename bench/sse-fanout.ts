/**
 * SSE fan-out (issue 31, ADR 59): the p99 from a PUT being sent to its event arriving on a live
 * stream, with many subscribers on one world ÷ the same with one subscriber, at a steady write
 * rate. Goal ≤ 2. The subscribers run in this process (lightly parsed: the event's pk only), so on
 * a 2-core machine they compete with data for the CPU: the 1,000 subscribers need a
 * machine of their own; the default here is 100.
 *
 *   ./onto bench sse-fanout [seconds] [rate] [subscribers]      (default 10 200 100)
 */
import * as http from 'node:http';
import { fmt, paced, percentile } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 10);
const rate = Number(process.argv[3] ?? 200);
const subscribers = Number(process.argv[4] ?? 100);
const stack = await benchStack({ dataEnv: { LIVE_BUFFER_EVENTS: '1000000' } });
const { data, token } = stack;
await stack.world('live', { objectTypes: { Item } });

/** Opens `n` streams; each arrival of `pk` is recorded against the time its write was sent. */
async function subscribe(n: number, sentAt: Map<string, number>, latencies: number[]) {
  const requests: http.ClientRequest[] = [];
  await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<void>((resolve, reject) => {
          const req = http.get(
            `${data.url}/v1/worlds/live/events?topics=objects`,
            { headers: { authorization: `Bearer ${token}` }, agent: false },
            (res) => {
              if (res.statusCode !== 200) return reject(new Error(`subscribe: ${res.statusCode}`));
              res.setEncoding('utf8');
              let rest = '';
              res.on('data', (chunk: string) => {
                const now = performance.now();
                const text = rest + chunk;
                const end = text.lastIndexOf('\n\n');
                rest = text.slice(end + 2);
                for (const m of text.slice(0, end).matchAll(/"pk":"(b-[0-9]+)"/g)) {
                  const sent = sentAt.get(m[1] as string);
                  if (sent !== undefined) latencies.push(now - sent);
                }
              });
              resolve();
            },
          );
          req.on('error', reject);
          requests.push(req);
        }),
    ),
  );
  return () => {
    for (const r of requests) r.destroy();
  };
}

async function round(n: number, tag: string) {
  const sentAt = new Map<string, number>();
  const latencies: number[] = [];
  const close = await subscribe(n, sentAt, latencies);
  const count = Math.round(seconds * rate);
  const writes = await paced(rate, count, (i) => {
    const pk = `b-${tag}${i}`.replace(/[^b0-9-]/g, '');
    sentAt.set(pk, performance.now());
    return call(data.url, 'PUT', `/v1/worlds/live/objects/Item/${pk}`, token, { properties: { amount: i } });
  });
  await Promise.all(writes);
  const expected = count * n;
  const deadline = Date.now() + 30_000;
  while (latencies.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  close();
  latencies.sort((a, b) => a - b);
  return { n, delivered: latencies.length, expected, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

// Uncounted: the first writes pay for warming data, its relay and the live reader.
await round(1, '0');
const one = await round(1, '1');
const many = await round(subscribers, '2');
for (const r of [one, many]) {
  console.log(
    `${fmt(r.n)} subscriber(s): ${fmt(r.delivered)}/${fmt(r.expected)} events delivered, p50 ${fmt(r.p50, 1)} ms, p99 ${fmt(r.p99, 1)} ms`,
  );
}
console.log(
  `p99 with ${subscribers} subscribers ÷ p99 with one, at ${rate} writes/s: ${(many.p99 / one.p99).toFixed(2)} (goal ≤ 2)`,
);
await stack.close();
process.exit(0);

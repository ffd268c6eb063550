/**
 * Webhook deliveries (issue 31, ADR 60) to a local receiver that verifies nothing and answers 204
 * at once: deliveries per second, data's CPU per delivery, and the p99 from a PUT being sent to
 * its delivery arriving, at a steady write rate (open loop), beside Kafka's EndToEndLatency on the
 * same broker in the same run (issue 31's goal: delivery p99 ≤ 3 × Kafka's p99).
 *
 *   ./onto bench webhooks [seconds] [rate]      (default 10 200; the issue's figure is at 500)
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpuMeter } from './lib/cpu.js';
import { fmt, kafkaEndToEnd, paced, percentile } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 10);
const rate = Number(process.argv[3] ?? 200);
const sentAt = new Map<string, number>();
const sentWall = new Map<string, number>();
const latencies: number[] = [];
// The parts of a delivery's latency, from the CloudEvent's time (the change's commit, ms on the wall
// clock): the write until its commit, and the commit until the receiver has the delivery.
const toCommit: number[] = [];
const fromCommit: number[] = [];
const putLatencies: number[] = [];
let bodyBytes = 0;
const receiver = http.createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (c: string) => {
    body += c;
  });
  req.on('end', () => {
    bodyBytes = Buffer.byteLength(body);
    const pk = /"pk":"(w-[0-9]+)"/.exec(body)?.[1];
    const sent = pk === undefined ? undefined : sentAt.get(pk);
    if (sent !== undefined) {
      latencies.push(performance.now() - sent);
      sentAt.delete(pk as string);
      const time = Date.parse(/"time":"([^"]+)"/.exec(body)?.[1] ?? '');
      const wall = sentWall.get(pk as string);
      if (!Number.isNaN(time) && wall !== undefined) {
        toCommit.push(time - wall);
        fromCommit.push(Date.now() - time);
      }
    }
    res.writeHead(204).end();
  });
});
await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
const port = (receiver.address() as AddressInfo).port;

const stack = await benchStack({ dataEnv: { ONTO_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' } });
const { data, token } = stack;
await stack.world('hooks', { objectTypes: { Item } });
await call(data.url, 'PUT', '/v1/worlds/hooks/webhooks/bench', token, {
  url: `http://127.0.0.1:${port}/hook`,
  events: ['object.created'],
});

const count = Math.round(seconds * rate);
const cpu = cpuMeter();
const started = performance.now();
const writes = await paced(rate, count, (i) => {
  const pk = `w-${i}`;
  const t0 = performance.now();
  sentAt.set(pk, t0);
  sentWall.set(pk, Date.now());
  return call(data.url, 'PUT', `/v1/worlds/hooks/objects/Item/${pk}`, token, { properties: { amount: i } }).then(() =>
    putLatencies.push(performance.now() - t0),
  );
});
await Promise.all(writes);
const deadline = Date.now() + 60_000;
while (latencies.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
const elapsed = (performance.now() - started) / 1000;
const used = cpu.stop();
for (const list of [latencies, toCommit, fromCommit, putLatencies]) list.sort((a, b) => a - b);
console.log(
  `${fmt(latencies.length)}/${fmt(count)} deliveries in ${fmt(elapsed, 1)} s: ${fmt(latencies.length / elapsed)} deliveries/s at ${rate} writes/s`,
);
console.log(
  `write → delivery: p50 ${fmt(percentile(latencies, 50), 1)} ms, p99 ${fmt(percentile(latencies, 99), 1)} ms`,
);
const parts = (name: string, list: number[]) =>
  `${name} p50 ${fmt(percentile(list, 50), 1)} ms, p99 ${fmt(percentile(list, 99), 1)} ms`;
console.log(
  `  ${parts('PUT answered', putLatencies)}; ${parts('write → commit', toCommit)}; ${parts('commit → delivery', fromCommit)}`,
);
// Kafka's own EndToEndLatency (acks=all, a record of the delivery body's size) on the same broker,
// after the load: the goal is delivery p99 ≤ 3 × Kafka's.
const { p99: k99 } = await kafkaEndToEnd(stack.topics.prefix, bodyBytes || 600);
console.log(
  `Kafka EndToEndLatency (acks=all, ${bodyBytes || 600} B) p99 ${k99} ms: delivery p99 ÷ Kafka's ${(percentile(latencies, 99) / k99).toFixed(2)} (goal ≤ 3)`,
);
const dataMs = used?.parts.get('data');
if (dataMs !== undefined) {
  console.log(
    `data's CPU per delivery (its write, relay, consumer and delivery together): ${fmt(dataMs / count, 2)} ms`,
  );
}
await stack.close();
receiver.close();
process.exit(0);

/**
 * End to end through the platform: a PUT of an object in data → the derived property it feeds
 * visible in intelligence (data's outbox and relay, Kafka, intelligence's inbox consumer, the
 * recompute, its commit). Open-loop writes at a steady rate (default 1,000/s), latency from the
 * moment the PUT was sent to the moment the new value is visible in intelligence's store (polled
 * every 2 ms; each value names the data write it was computed from), p50 and p99; beside Kafka's
 * own EndToEndLatency tool (acks=all, same record size) on the same broker, in the same run.
 * Goal: p99 ≤ 3 × Kafka's.
 *
 * Then the highest steady write rate: bulk writes (50 objects a request) at rising rates, 10 s
 * each, until intelligence's backlog no longer stays bounded (it must apply what was written
 * within 2 s of the step's end, and keep up within 10% of the offered rate).
 *
 *   ./onto bench intelligence-e2e [seconds] [rate]      (default 20 s at 1000 writes/s)
 */
import { testBroker, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { fmt, kafkaTool, percentile } from './lib/harness.js';
import { benchStack, call } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 20);
const rate = Number(process.argv[3] ?? 1000);
const objects = 10_000;
const steps = (process.env.BENCH_STEPS ?? '1000,2000,3000,4000,6000,8000').split(',').map(Number);

const stack = await benchStack({ intelligence: true, dataEnv: { DB_POOL_MAX: '16' } });
const { data, intelligence, intelligenceDb, token } = stack;
if (!intelligence || !intelligenceDb) throw new Error('no intelligence');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls intelligence's store for values computed from data writes above the last one seen. */
function watcher(db: pg.Client) {
  let last = 0;
  let stopped = false;
  const seen = new Map<number, number>(); // data seq → when visible
  const loop = (async () => {
    while (!stopped) {
      const { rows } = await db.query<{ seq: string }>(
        `SELECT source_seq AS seq FROM derived_values
          WHERE world_id = 'bench' AND name = 'doubled' AND source_seq > $1`,
        [last],
      );
      const now = performance.now();
      for (const r of rows) {
        const seq = Number(r.seq);
        if (!seen.has(seq)) seen.set(seq, now);
        if (seq > last) last = seq;
      }
      await sleep(2);
    }
  })();
  return {
    seen,
    get last() {
      return last;
    },
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

try {
  await stack.world('bench', {
    objectTypes: {
      Item: {
        displayName: 'Item',
        primaryKey: 'id',
        properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
      },
    },
  });
  await call(intelligence.url, 'PUT', '/v1/worlds/bench/derived-properties/doubled', token, {
    objectType: 'Item',
    expression: 'amount * 2',
    maxStalenessMs: 1000,
  });
  const db = new pg.Client(intelligenceDb.url);
  await db.connect();
  const watch = watcher(db);

  // --- steady PUTs, open loop: write i is sent at start + i / rate, whatever the answers do
  let n = 0;
  const put = async () => {
    const i = n++;
    const pk = `item-${i % objects}`;
    const sent = performance.now();
    const res = await fetch(`${data.url}/v1/worlds/bench/objects/Item/${pk}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ properties: { id: pk, amount: i } }),
    });
    await res.arrayBuffer();
    const answered = performance.now();
    const seq = Number(/data=(\d+)/.exec(res.headers.get('x-consistency-token') ?? '')?.[1]);
    return { ok: res.status < 300, sent, answered, seq };
  };
  const warm = await Promise.all(Array.from({ length: 200 }, put)); // connections, JIT, caches
  if (!warm.every((w) => w.ok)) throw new Error('warm-up PUTs failed');
  await sleep(1000);

  const writes: Promise<{ ok: boolean; sent: number; answered: number; seq: number }>[] = [];
  const start = performance.now();
  const total = Math.round(seconds * rate);
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    writes.push(put());
  }
  const done = await Promise.all(writes);
  const offeredFor = (performance.now() - start) / 1000;
  const maxSeq = Math.max(...done.map((w) => w.seq));
  const deadline = performance.now() + 60_000;
  while (watch.last < maxSeq && performance.now() < deadline) await sleep(10);
  await watch.stop();

  const failed = done.filter((w) => !w.ok).length;
  const e2e: number[] = [];
  const putLatency: number[] = [];
  let invisible = 0;
  for (const w of done) {
    if (!w.ok) continue;
    putLatency.push(w.answered - w.sent);
    const visible = watch.seen.get(w.seq);
    // A write superseded by a later one of the same object before intelligence saw it is
    // visible through the later value: it has no value of its own to measure.
    if (visible === undefined) invisible++;
    else e2e.push(visible - w.sent);
  }
  e2e.sort((a, b) => a - b);
  putLatency.sort((a, b) => a - b);

  // --- Kafka's own end-to-end latency on the same broker
  const dataClient = new pg.Client(stack.dataDb.url);
  await dataClient.connect();
  const { rows: sample } = await dataClient.query<{ n: number }>(
    `SELECT octet_length(body)::int AS n FROM outbox WHERE topic LIKE '%onto.changes.objects' LIMIT 1`,
  );
  await dataClient.end();
  const recordBytes = sample[0]?.n ?? 400;
  const { kafkaBrokers } = testEndpoints();
  const admin = await testBroker(kafkaBrokers).admin();
  const e2eTopic = `${stack.topics.prefix}bench.e2e`;
  await admin.ensureTopics([{ name: e2eTopic, partitions: 1 }]);
  await admin.disconnect();
  const kafka = await kafkaTool('org.apache.kafka.tools.EndToEndLatency', [
    kafkaBrokers,
    e2eTopic,
    '5000',
    'all',
    String(recordBytes),
  ]);
  const kafkaP = kafka.match(/Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)/);
  const k50 = Number(kafkaP?.[1]);
  const k99 = Number(kafkaP?.[2]);

  console.log('');
  console.log(
    `| ${fmt(total)} PUTs at ${fmt(rate)}/s offered (${fmt(total / offeredFor)}/s achieved, ${failed} failed) | p50 ms | p99 ms |`,
  );
  console.log('|---|---:|---:|');
  console.log(
    `| PUT answered by data | ${percentile(putLatency, 50).toFixed(1)} | ${percentile(putLatency, 99).toFixed(1)} |`,
  );
  console.log(
    `| PUT sent → derived value visible in intelligence (${fmt(e2e.length)} measured, ${fmt(invisible)} superseded) | ${percentile(e2e, 50).toFixed(1)} | ${percentile(e2e, 99).toFixed(1)} |`,
  );
  console.log(`| Kafka EndToEndLatency (acks=all, ${recordBytes} B) | ${k50} | ${k99} |`);
  const ratio = percentile(e2e, 99) / k99;
  console.log(`p99 ratio ${ratio.toFixed(2)} × Kafka's (goal ≤ 3)`);

  // --- the highest steady rate: bulk writes of 50 objects at rising rates
  console.log('');
  console.log(
    '| offered objects/s | written/s | applied by intelligence within 2 s of the step end | p99 visible ms |',
  );
  console.log('|---:|---:|---:|---:|');
  let best = 0;
  let round = 0;
  for (const target of steps) {
    round++;
    const batch = 50;
    const perSecond = target / batch;
    const stepSeconds = 10;
    const watch2 = watcher(db);
    const sends: Promise<{ seq: number; sent: number; count: number }>[] = [];
    const t0 = performance.now();
    for (let i = 0; i < perSecond * stepSeconds; i++) {
      const due = t0 + (i * 1000) / perSecond;
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait);
      const rows = Array.from({ length: batch }, (_, j) => {
        const pk = `bulk-${round}-${i * batch + j}`;
        return JSON.stringify({ properties: { id: pk, amount: j } });
      }).join('\n');
      const sent = performance.now();
      sends.push(
        fetch(`${data.url}/v1/worlds/bench/bulk/Item`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-ndjson', authorization: `Bearer ${token}` },
          body: `${rows}\n`,
        }).then(async (res) => {
          const body = (await res.json()) as { seq?: number; created?: number };
          return { seq: body.seq ?? 0, sent, count: body.created ?? 0 };
        }),
      );
    }
    const results = await Promise.all(sends);
    const elapsed = (performance.now() - t0) / 1000;
    const written = results.reduce((a, r) => a + r.count, 0);
    const top = Math.max(...results.map((r) => r.seq));
    const until = performance.now() + 2000;
    while (watch2.last < top && performance.now() < until) await sleep(10);
    await watch2.stop();
    const applied = [...watch2.seen.keys()].length;
    const visible = results
      .map((r) => {
        const at = watch2.seen.get(r.seq);
        return at === undefined ? Number.POSITIVE_INFINITY : at - r.sent;
      })
      .sort((a, b) => a - b);
    const p99 = percentile(visible, 99);
    console.log(
      `| ${fmt(target)} | ${fmt(written / elapsed)} | ${fmt(applied)} of ${fmt(written)} | ${Number.isFinite(p99) ? p99.toFixed(0) : '—'} |`,
    );
    const steady = applied >= written && written / elapsed >= target * 0.9;
    if (!steady) break;
    best = target;
  }
  console.log(`highest steady rate: ${best ? `${fmt(best)} objects/s` : 'below the first step'}`);
  await db.end();
} finally {
  await stack.close();
}

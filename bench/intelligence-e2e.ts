/**
 * End to end through the platform: a PUT of an object in data → the derived property it feeds
 * visible in intelligence (data's outbox and relay, Kafka, intelligence's inbox consumer, the
 * recompute, its commit). Open-loop writes at a steady rate (default 1,000/s), latency from the
 * moment the PUT was sent to the moment the new value is visible in intelligence's store (heard
 * by NOTIFY at commit; each value names the data write it was computed from), p50 and p99;
 * beside Kafka's own EndToEndLatency tool (acks=all, same record size) on the same broker, in the
 * same run. Before it, 5 s of the same load that is not counted (BENCH_WARMUP). It also prints the
 * CPU each part of the stack spent per write (ADR 19).
 * Goal: p99 ≤ 3 × Kafka's.
 *
 * Then the highest steady write rate: bulk writes (50 objects a request) at rising rates, 10 s
 * each, until intelligence's backlog no longer stays bounded (it must apply what was written
 * within 2 s of the step's end, and keep up within 10% of the offered rate).
 *
 *   ./onto bench intelligence-e2e [seconds] [rate]      (default 20 s at 1000 writes/s)
 *   BENCH_WORLDS=4 spreads the writes over four worlds; BENCH_WARMUP=0 skips the warm-up;
 *   BENCH_KEYS=200 updates 200 objects over and over instead of creating one per write.
 *   BENCH_RATES=50,100,200,400,1000 measures each rate in turn (each with its warm-up), beside one
 *   run of Kafka's tool, and ends with a table of them all: where the stack saturates, and the
 *   highest rate at which the goal holds on this machine (ADR 19).
 */

import * as http from 'node:http';
import * as os from 'node:os';
import pg from 'pg';
import { cpuMeter } from './lib/cpu.js';
import { fmt, kafkaEndToEnd, paced, percentile } from './lib/harness.js';
import { benchStack, call } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 20);
const rates = (process.env.BENCH_RATES ?? process.argv[3] ?? '1000')
  .split(',')
  .filter((r) => r.trim() !== '')
  .map(Number);
if (rates.length === 0 || rates.some((r) => !(r > 0))) throw new Error(`rates must be positive numbers: ${rates}`);
const warmupSeconds = Number(process.env.BENCH_WARMUP ?? 5);
// BENCH_WORLDS=N spreads the writes over N worlds, round robin: intelligence applies each world's
// batches one transaction at a time, and different worlds' beside each other (ADR 18).
const worlds = Array.from({ length: Number(process.env.BENCH_WORLDS ?? 1) }, (_, k) =>
  k === 0 ? 'bench' : `bench-${k + 1}`,
);
// Each measured write its own object (none is superseded), or BENCH_KEYS=n: the writes cycle over
// n objects, so that every write supersedes a version and a value (the read model's history,
// ADR 33, pays its most).
const objects = Number(process.env.BENCH_KEYS ?? 1_000_000);
// BENCH_STEPS="" skips the search for the highest steady rate.
const steps = (process.env.BENCH_STEPS ?? '1000,2000,3000,4000,6000,8000')
  .split(',')
  .filter((s) => s.trim() !== '')
  .map(Number);

const stack = await benchStack({ intelligence: true, dataEnv: { DB_POOL_MAX: '16' } });
const { data, intelligence, intelligenceDb, token } = stack;
if (!intelligence || !intelligenceDb) throw new Error('no intelligence');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// At most 128 connections to data, kept alive: an open loop beyond what data answers queues
// here (and shows in the latency) instead of opening sockets until the server resets them.
const agent = new http.Agent({ keepAlive: true, maxSockets: 128 });
function request(url: string, method: string, headers: Record<string, string>, body: string) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const req = http.request(url, { method, headers, agent }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Hears every write of a `doubled` value in intelligence's store when it commits: the benchmark
 * puts a trigger on derived_values in its own copy of intelligence's database, which NOTIFYs the
 * pk and the data seq the value was computed from; notifications are delivered at commit, so
 * their arrival is when the value became visible. (Polling for the awaited values instead, every
 * 1-5 ms, was a sixth of PostgreSQL's busy time at 1,000 writes/s: load on the stack it measured.)
 */
async function listen(db: pg.Client) {
  await db.query(`CREATE FUNCTION bench_derived_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('bench_derived', NEW.pk || ' ' || NEW.source_seq);
      RETURN NULL;
    END $$`);
  await db.query(`CREATE TRIGGER bench_derived_written AFTER INSERT OR UPDATE ON derived_values
    FOR EACH ROW WHEN (NEW.world_id LIKE 'bench%' AND NEW.name = 'doubled') EXECUTE FUNCTION bench_derived_written()`);
  // pk → the highest seq heard and when (performance.now()), for writes awaited after their value came.
  const heard = new Map<string, { seq: number; at: number }>();
  const watchers = new Set<(pk: string, seq: number, at: number) => void>();
  db.on('notification', (n) => {
    const at = performance.now();
    const payload = n.payload ?? '';
    const cut = payload.lastIndexOf(' '); // "<pk> <seq>": a pk may hold spaces, a seq does not
    const pk = payload.slice(0, cut);
    const seq = payload.slice(cut + 1);
    const prior = heard.get(pk);
    if (!prior || Number(seq) > prior.seq) heard.set(pk, { seq: Number(seq), at });
    for (const w of watchers) w(pk, Number(seq), at);
  });
  await db.query('LISTEN bench_derived');
  /** A watcher of awaited writes: a write of object k with data seq s is visible once k's value was computed from a write at or after s. */
  return () => {
    const waiting = new Map<string, number>(); // pk → the seq its value must reach
    const seen = new Map<string, number>(); // pk → when its awaited value became visible
    const seenAt = new Map<string, number>(); // the same as wall-clock ms (the database's clock: same host)
    const visible = (pk: string, at: number) => {
      seen.set(pk, at);
      seenAt.set(pk, performance.timeOrigin + at);
      waiting.delete(pk);
    };
    const hear = (pk: string, seq: number, at: number) => {
      const want = waiting.get(pk);
      if (want !== undefined && seq >= want) visible(pk, at);
    };
    watchers.add(hear);
    return {
      seen,
      seenAt,
      /** Waits for object `pk`'s value to reflect data write `seq`. */
      expect(pk: string, seq: number) {
        const already = heard.get(pk);
        if (already && already.seq >= seq) return visible(pk, already.at);
        waiting.set(pk, Math.max(seq, waiting.get(pk) ?? 0));
      },
      get pending() {
        return waiting.size;
      },
      async stop() {
        watchers.delete(hear);
      },
    };
  };
}

try {
  for (const world of worlds) {
    await stack.world(world, {
      objectTypes: {
        Item: {
          displayName: 'Item',
          primaryKey: 'id',
          properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
        },
      },
    });
    await call(intelligence.url, 'PUT', `/v1/worlds/${world}/derived-properties/doubled`, token, {
      objectType: 'Item',
      expression: 'amount * 2',
      maxStalenessMs: 1000,
    });
  }
  const db = new pg.Client(intelligenceDb.url);
  db.on('error', () => {}); // the database is dropped at the end, connected or not
  await db.connect();
  const watcher = await listen(db);
  const watch = watcher();

  // --- steady PUTs
  let n = 0;
  const failures = new Map<string, number>();
  const put = async () => {
    const i = n++;
    const pk = `item-${i % objects}`;
    const sent = performance.now();
    const res = await request(
      `${data.url}/v1/worlds/${worlds[i % worlds.length]}/objects/Item/${pk}`,
      'PUT',
      {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
      },
      JSON.stringify({ properties: { id: pk, amount: i } }),
    );
    const answered = performance.now();
    const failure = `${res.status} ${res.body.slice(0, 160)}`;
    if (res.status >= 300) failures.set(failure, (failures.get(failure) ?? 0) + 1);
    const seq = Number(/data=(\d+)/.exec(String(res.headers['x-consistency-token'] ?? ''))?.[1]);
    if (res.status < 300) watch.expect(pk, seq);
    return { ok: res.status < 300, sent, answered, seq, pk };
  };
  /** Writes at `rate` for `forSeconds`, open loop, then waits (bounded) until every value is visible. */
  const openLoop = async (forSeconds: number, rate: number) => {
    const start = performance.now();
    const count = Math.round(forSeconds * rate);
    const done = await Promise.all(await paced(rate, count, put));
    const offeredFor = (performance.now() - start) / 1000;
    const deadline = performance.now() + 60_000;
    while (watch.pending > 0 && performance.now() < deadline) await sleep(10);
    return { done, count, offeredFor };
  };
  // Warm-up, not counted: connections, then the same load as measured. Started cold, the
  // services spend their first seconds compiling, and at 1,000/s the backlog those seconds left
  // was queued behind for the rest of the run (p99 2,152 ms against 347 ms warmed; ADR 19).
  const warm = await Promise.all(Array.from({ length: 200 }, put));
  if (!warm.every((w) => w.ok)) throw new Error('warm-up PUTs failed');

  /** One rate: its warm-up, then the measured writes, with the CPU they cost. */
  const measure = async (rate: number) => {
    if (warmupSeconds > 0) await openLoop(warmupSeconds, rate);
    failures.clear();
    await sleep(1000);
    const cpu = cpuMeter();
    const { done, count: total, offeredFor } = await openLoop(seconds, rate);
    const used = cpu.stop(); // from the first write to the last value visible
    const failed = done.filter((w) => !w.ok).length;
    const failedHow = [...failures];
    const e2e: number[] = [];
    const putLatency: number[] = [];
    let invisible = 0;
    for (const w of done) {
      if (!w.ok) continue;
      putLatency.push(w.answered - w.sent);
      const visible = watch.seen.get(w.pk);
      if (visible === undefined) invisible++;
      else e2e.push(visible - w.sent);
    }
    e2e.sort((a, b) => a - b);
    putLatency.sort((a, b) => a - b);
    return {
      rate,
      done,
      total,
      offeredFor,
      used,
      failed,
      failedHow,
      e2e,
      putLatency,
      invisible,
    };
  };
  const runs: Awaited<ReturnType<typeof measure>>[] = [];
  for (const rate of rates) runs.push(await measure(rate));
  await watch.stop();

  // --- Kafka's own end-to-end latency on the same broker
  const dataClient = new pg.Client(stack.dataDb.url);
  await dataClient.connect();
  const { rows: sample } = await dataClient.query<{ n: number }>(
    `SELECT octet_length(body)::int AS n FROM outbox WHERE topic LIKE '%onto.changes.objects' LIMIT 1`,
  );
  await dataClient.end();
  const recordBytes = sample[0]?.n ?? 400;
  const { p50: k50, p99: k99 } = await kafkaEndToEnd(stack.topics.prefix, recordBytes);

  // Where the time goes, on the database's clock: data's transaction began → the relay marked the
  // event sent (after the broker's ack) → intelligence's batch transaction began → visible.
  const dataDb = new pg.Client(stack.dataDb.url);
  await dataDb.connect();
  const { rows: outbox } = await dataDb.query<{ event_id: string; key: string; created: Date; sent: Date }>(
    `SELECT event_id::text, partition_key AS key, created_at AS created, sent_at AS sent
       FROM outbox JOIN outbox_sent_rows USING (id) WHERE topic LIKE '%onto.changes.objects'`,
  );
  await dataDb.end();
  const { rows: inbox } = await db.query<{ event_id: string; at: Date }>(
    `SELECT event_id::text, processed_at AS at FROM inbox WHERE consumer LIKE '%intelligence-changes'`,
  );
  const began = new Map(inbox.map((r) => [r.event_id, r.at.getTime()]));
  const cores = os.availableParallelism();
  const summary: string[] = [];
  const holding: number[] = []; // the rates whose p99 is within 3 × Kafka's
  for (const run of runs) {
    const { rate, done, total, offeredFor, used, failed, failedHow, e2e, putLatency, invisible } = run;
    console.log('');
    for (const [what, count] of failedHow) console.log(`failed ${count}×: ${what}`);
    console.log(
      `| ${fmt(total)} PUTs at ${fmt(rate)}/s offered${worlds.length > 1 ? ` over ${worlds.length} worlds` : ''} (${fmt(total / offeredFor)}/s achieved, ${failed} failed) | p50 ms | p99 ms |`,
    );
    console.log('|---|---:|---:|');
    console.log(
      `| PUT answered by data | ${percentile(putLatency, 50).toFixed(1)} | ${percentile(putLatency, 99).toFixed(1)} |`,
    );
    console.log(
      `| PUT sent → derived value visible in intelligence (${fmt(e2e.length)} measured, ${fmt(invisible)} not visible within 60 s) | ${percentile(e2e, 50).toFixed(1)} | ${percentile(e2e, 99).toFixed(1)} |`,
    );
    console.log(`| Kafka EndToEndLatency (acks=all, ${recordBytes} B) | ${k50} | ${k99} |`);
    const segments = { relay: [] as number[], deliver: [] as number[], apply: [] as number[] };
    const measured = new Set(done.filter((w) => w.ok).map((w) => w.pk));
    for (const o of outbox) {
      const pk = decodeURIComponent(o.key.split('/').pop() ?? '');
      const visibleAt = watch.seenAt.get(pk);
      const startedAt = began.get(o.event_id);
      if (!measured.has(pk) || visibleAt === undefined || startedAt === undefined) continue;
      segments.relay.push(o.sent.getTime() - o.created.getTime());
      segments.deliver.push(startedAt - o.sent.getTime());
      segments.apply.push(visibleAt - startedAt);
    }
    for (const list of Object.values(segments)) list.sort((a, b) => a - b);
    const seg = (list: number[]) => `${percentile(list, 50).toFixed(0)} | ${percentile(list, 99).toFixed(0)}`;
    console.log(`| … data's transaction began → relay marked it sent (broker acked) | ${seg(segments.relay)} |`);
    console.log(`| … marked sent → intelligence's batch transaction began | ${seg(segments.deliver)} |`);
    console.log(`| … batch began → value visible | ${seg(segments.apply)} |`);
    let busy = '';
    let perWriteAll = '';
    if (used) {
      const perWrite = (ms: number) => (ms / total).toFixed(2);
      const parts = [...used.parts].sort((a, b) => b[1] - a[1]);
      busy = (used.total / 1000 / used.seconds).toFixed(2);
      perWriteAll = perWrite(used.total);
      console.log(
        `CPU per write, ms: ${parts.map(([part, ms]) => `${part} ${perWrite(ms)}`).join(', ')}; in all ${perWriteAll} (${busy} cores busy of ${cores})`,
      );
    }
    const ratio = percentile(e2e, 99) / k99;
    console.log(`p99 ratio ${ratio.toFixed(2)} × Kafka's (goal ≤ 3)`);
    summary.push(
      `| ${fmt(rate)} | ${busy || '—'} | ${perWriteAll || '—'} | ${percentile(e2e, 50).toFixed(1)} | ${percentile(e2e, 99).toFixed(1)} | ${ratio.toFixed(2)} |`,
    );
    if (ratio <= 3) holding.push(rate);
  }
  if (runs.length > 1) {
    console.log('');
    console.log(
      `| writes/s | cores busy of ${cores} | CPU per write, ms | p50 ms | p99 ms | p99 × Kafka's (${k99} ms) |`,
    );
    console.log('|---:|---:|---:|---:|---:|---:|');
    for (const line of summary) console.log(line);
    console.log(
      `highest measured rate with p99 ≤ 3 × Kafka's: ${holding.length > 0 ? `${fmt(Math.max(...holding))}/s` : 'none'}`,
    );
  }

  // --- the highest steady rate: bulk writes of 50 objects at rising rates
  if (steps.length > 0) {
    console.log('');
    console.log(
      '| offered objects/s | written/s | applied by intelligence within 2 s of the step end | p99 visible ms |',
    );
    console.log('|---:|---:|---:|---:|');
  }
  let best = 0;
  let round = 0;
  for (const target of steps) {
    round++;
    const batch = 50;
    const perSecond = target / batch;
    const stepSeconds = 10;
    const watch2 = watcher();
    const t0 = performance.now();
    const sends = await paced(perSecond, perSecond * stepSeconds, (i) => {
      const pks = Array.from({ length: batch }, (_, j) => `bulk-${round}-${i}-${String(j).padStart(2, '0')}`);
      const rows = pks.map((pk, j) => JSON.stringify({ properties: { id: pk, amount: j } })).join('\n');
      const sent = performance.now();
      // The request's objects commit together; the last one stands for them all.
      const sentinel = pks[pks.length - 1] ?? '';
      return fetch(`${data.url}/v1/worlds/bench/bulk/Item`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-ndjson', authorization: `Bearer ${token}` },
        body: `${rows}\n`,
      }).then(async (res) => {
        const body = (await res.json()) as { created?: number };
        if (res.ok) watch2.expect(sentinel, 1);
        return { sent, count: body.created ?? 0, sentinel };
      });
    });
    const results = await Promise.all(sends);
    const elapsed = (performance.now() - t0) / 1000;
    const written = results.reduce((a, r) => a + r.count, 0);
    const countApplied = async () => {
      const { rows: counted } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM derived_values
          WHERE world_id = 'bench' AND object_type = 'Item' AND name = 'doubled' AND pk LIKE $1`,
        [`bulk-${round}-%`],
      );
      return counted[0]?.n ?? 0;
    };
    // Everything written must be applied within 2 s of the step's end.
    const until = performance.now() + 2000;
    let applied = await countApplied();
    while (applied < written && performance.now() < until) {
      await sleep(20);
      applied = await countApplied();
    }
    await watch2.stop();
    const visible = results
      .map((r) => {
        const at = watch2.seen.get(r.sentinel);
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
  if (steps.length > 0) {
    console.log(`highest steady rate: ${best ? `${fmt(best)} objects/s` : 'below the first step'}`);
  }
  await db.end();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  await stack.close();
}

/**
 * A read-heavy mix against data — 90 % token-less GETs (half one object, half a 20-object list
 * filtered on an indexed property), 10 % PUTs — with one streaming replica ÷ without, in one run
 * (issue 33, docs/adr/0080). Two data instances on the same database serve it in turn, alternated
 * per round: one without DATABASE_REPLICA_URLS, one with the replica; the figure is their reads/s.
 *
 * The replica shares this machine's cores with the primary, data and the load generator: it adds
 * no CPU, only a second server's caches and locks, so the ratio is a floor of what a replica on
 * its own machine gives.
 *
 *   ./onto bench read-replica [seconds] [rounds] [objects]   (default 10 s, 3 rounds, 10,000 objects)
 *
 * `./onto bench read-replica` starts the local replica (as `./onto up --pg-replica`) and exports
 * ONTO_TEST_PG_REPLICA_URL. BENCH_CONNECTIONS (default 32), BENCH_WARMUP (s, default 2).
 */
import { testEndpoints } from '@onto/shared/testing';
import autocannon from 'autocannon';
import { fmt, report, until } from './lib/harness.js';
import { startService } from './lib/services.js';
import { benchStack, call, Item } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 3);
const objects = Number(process.argv[4] ?? 10_000);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
const warmup = Number(process.env.BENCH_WARMUP ?? 2);
const replicaUrl = process.env.ONTO_TEST_PG_REPLICA_URL;
if (!replicaUrl) {
  throw new Error('ONTO_TEST_PG_REPLICA_URL is not set: run it as ./onto bench read-replica, which starts the replica');
}

const stack = await benchStack({ dataEnv: { DB_POOL_MAX: '16' } });
const { dataDb, token } = stack;
const database = new URL(dataDb.url).pathname;
// The same database on the replica, as the primary's URL names it there.
const endpoints = testEndpoints();
const replica = await startService('data', {
  REDIS_URL: endpoints.redisUrl,
  KAFKA_BROKERS: endpoints.kafkaBrokers,
  ONTO_TOPIC_PREFIX: stack.topics.prefix,
  DATABASE_URL: dataDb.url,
  DB_POOL_MAX: '16',
  DATABASE_REPLICA_URLS: replicaUrl.replace(/\/[^/]*$/, database),
});

/** The samples of a metric in a Prometheus text exposition, by their labels. */
async function samples(base: string, name: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const found = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}\\{(.*)\\} (\\S+)$`).exec(line);
    if (m?.[1] !== undefined) found.set(m[1], Number(m[2]));
  }
  return found;
}
/** The median of sorted numbers (the mean of the middle two for an even count). */
const middleOf = (sorted: number[]) =>
  ((sorted[Math.floor((sorted.length - 1) / 2)] as number) + (sorted[Math.ceil((sorted.length - 1) / 2)] as number)) /
  2;
const sample = async (base: string, name: string, labels: string) =>
  [...(await samples(base, name))].filter(([l]) => l.includes(labels)).reduce((sum, [, v]) => sum + v, 0);

try {
  await stack.world('bench', { objectTypes: { Item } });
  const body = `${Array.from({ length: objects }, (_, i) =>
    JSON.stringify({ properties: { id: `item-${i}`, name: `item ${i}`, amount: i % 1000, status: 'open' } }),
  ).join('\n')}\n`;
  await call(stack.data.url, 'POST', '/v1/worlds/bench/bulk/Item', token, body, {
    'content-type': 'application/x-ndjson',
  });
  // The replica has replayed the objects and the instance reads from it.
  await until(
    'the replica caught up and in use',
    async () =>
      (await sample(replica.url, 'onto_db_replica_usable', 'replica=')) === 1 &&
      (await fetch(`${replica.url}/v1/worlds/bench/objects/Item/item-${objects - 1}`, {
        headers: { authorization: `Bearer ${token}` },
      }).then((r) => r.status)) === 200,
    60_000,
  );

  let n = 0;
  /** Reads and writes answered 2xx by one run of the mix against `base`, and the reads' p99. */
  const mix = async (base: string, duration: number) => {
    const counts = { reads: 0, writes: 0, failed: 0 };
    const result = await autocannon({
      url: base,
      connections,
      duration,
      requests: [
        {
          setupRequest: (req, context: { write?: boolean }) => {
            const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
            const r = Math.random();
            const pk = `item-${Math.floor(Math.random() * objects)}`;
            context.write = r < 0.1;
            if (context.write) {
              n++;
              return {
                ...req,
                method: 'PUT',
                path: `/v1/worlds/bench/objects/Item/${pk}`,
                headers,
                body: JSON.stringify({ properties: { id: pk, name: `item ${pk}`, amount: n % 1000, status: 'open' } }),
              };
            }
            const path =
              r < 0.55
                ? `/v1/worlds/bench/objects/Item/${pk}`
                : `/v1/worlds/bench/objects/Item?filter=amount:eq:${Math.floor(Math.random() * 1000)}&limit=20`;
            return { ...req, method: 'GET', path, headers, body: undefined };
          },
          onResponse: (status, _body, context: { write?: boolean }) => {
            if (status >= 300) counts.failed++;
            else if (context.write) counts.writes++;
            else counts.reads++;
          },
        },
      ],
    });
    if (counts.failed > 0) throw new Error(`${counts.failed} requests of the mix failed against ${base}`);
    return { readRate: counts.reads / duration, writeRate: counts.writes / duration, p99: result.latency.p99 };
  };

  const sides = { primary: stack.data.url, replica: replica.url };
  const runs: { primary: Awaited<ReturnType<typeof mix>>; replica: Awaited<ReturnType<typeof mix>> }[] = [];
  const routedBefore = await samples(replica.url, 'onto_db_reads_total');
  for (let round = 1; round <= rounds; round++) {
    // Alternated, so that neither side always runs in the machine's quieter moments.
    const order = round % 2 === 1 ? (['primary', 'replica'] as const) : (['replica', 'primary'] as const);
    const run: Partial<(typeof runs)[number]> = {};
    for (const side of order) {
      await mix(sides[side], warmup);
      run[side] = await mix(sides[side], seconds);
    }
    runs.push(run as (typeof runs)[number]);
  }
  // Where the instance with the replica sent the reads (warm-ups included), and why.
  const routed = [...(await samples(replica.url, 'onto_db_reads_total'))]
    .map(([labels, v]) => `${labels.replaceAll('"', '')}: ${fmt(v - (routedBefore.get(labels) ?? 0))}`)
    .join('; ');

  console.log('');
  console.log(
    `| round (${connections} connections, ${seconds} s, ${fmt(objects)} objects) | side | reads/s | writes/s | p99 ms |`,
  );
  console.log('|---|---|---:|---:|---:|');
  for (const [i, run] of runs.entries()) {
    for (const side of ['primary', 'replica'] as const) {
      const r = run[side];
      console.log(
        `| ${i + 1} | ${side === 'primary' ? 'primary only' : 'one replica'} | ${fmt(r.readRate)} | ${fmt(r.writeRate)} | ${r.p99} |`,
      );
    }
  }
  const ratios = runs.map((r) => r.replica.readRate / r.primary.readRate);
  const sorted = [...ratios].sort((a, b) => a - b);
  const median = middleOf(sorted);
  console.log(`reads routed by the instance with the replica: ${routed}`);
  console.log(
    `reads/s with one replica ÷ without: ${ratios.map((r) => r.toFixed(2)).join(', ')} (median ${median.toFixed(2)}; a floor: the replica shares the cores)`,
  );
  report('read-replica', { 'reads/s with a replica ÷ without': median });
} finally {
  await replica.stop();
  await stack.close();
}

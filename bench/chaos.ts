/**
 * The chaos run (issue 18, ADR 41): two instances of control, data and intelligence on a private
 * Kafka broker and a private Redis, under a mixed workload, while a fault schedule kills and
 * restarts instances, stops the broker and Redis, flushes Redis and disrupts PostgreSQL. Then
 * the faults stop, the stack is left to drain, and what every acknowledged write promised is
 * checked against data, the wire (onto.changes.objects), intelligence and the DLQs.
 *
 *   node --conditions=@onto/source --import tsx bench/chaos.ts [minutes] [--pg-restart] [--brokers 1|3] [--pg-replica] [--json FILE]
 *
 * (`./onto chaos [minutes]` runs it.) Exits 1 on any violation, 2 when the run itself broke.
 * PostgreSQL is shared with other work: by default its fault terminates the run's own
 * connections (pg_terminate_backend); `--pg-restart` restarts the server (pg_ctlcluster), which
 * only a machine of its own (CI) should do. `--brokers 3` runs a cluster of three brokers of its own
 * (replication 3, min.insync.replicas 2; docs/adr/0053) and adds two faults: SIGKILL of the broker
 * that leads the most partitions, and a rolling restart of the three; a probe producer (acks=all)
 * measures the longest gap between acknowledged records through each broker fault. `--pg-replica`
 * gives data and intelligence the streaming replica of the shared server (ONTO_TEST_PG_REPLICA_URL,
 * else 127.0.0.1:5433, as `./onto up --pg-replica` starts it; docs/adr/0080) as
 * DATABASE_REPLICA_URLS, and adds a fault: the replica's replay paused for a few seconds.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { migrations as controlMigrations } from '@onto/control/app';
import { migrations as dataMigrations } from '@onto/data/app';
import { migrations as intelligenceMigrations } from '@onto/intelligence/app';
import { createKafkaBroker } from '@onto/shared';
import {
  createTestDatabase,
  createTestTopics,
  type PrivateKafka,
  startPrivateKafka,
  type TestDatabase,
  testEndpoints,
  testIdentityEnv,
  testLogger,
} from '@onto/shared/testing';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { repo } from './lib/harness.js';
import { liveViolations, SseWatch, WebhookReceiver } from './lib/live-watch.js';
import { freePort } from './lib/services.js';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rand = (n: number) => Math.floor(Math.random() * n);
const WORLD = 'chaos';
const BOOTSTRAP = 'chaos-bootstrap-token-0123456789abcdef';

// ---------------------------------------------------------------- options
const argv = process.argv.slice(2);
const brokersAt = argv.findIndex((a) => a === '--brokers' || a.startsWith('--brokers='));
const brokersArg =
  brokersAt < 0 ? '1' : ((argv[brokersAt]?.includes('=') ? argv[brokersAt]?.split('=')[1] : argv[brokersAt + 1]) ?? '');
if (brokersArg !== '1' && brokersArg !== '3') {
  process.stderr.write(`--brokers must be 1 or 3 (got '${brokersArg}')\n`);
  process.exit(2);
}
const brokerNodes = Number(brokersArg) as 1 | 3;
const minutes = Number(argv.find((a, i) => /^\d+(\.\d+)?$/.test(a) && !(brokersAt >= 0 && i === brokersAt + 1)) ?? '2');
const pgRestart = argv.includes('--pg-restart');
const pgReplica = argv.includes('--pg-replica')
  ? (process.env.ONTO_TEST_PG_REPLICA_URL ?? 'postgres://postgres@127.0.0.1:5433/postgres')
  : undefined;
/** The replica's URL of a database of the run (the replica holds every database of the server). */
const onReplica = (url: string) => {
  const at = new URL(pgReplica as string);
  at.pathname = new URL(url).pathname;
  return at.toString();
};
const jsonOut = argv.includes('--json') ? argv[argv.indexOf('--json') + 1] : undefined;
const durationMs = Math.max(20_000, minutes * 60_000);
/** Faults stop this long before the workload does, so that the last writes meet a whole stack. */
const calmMs = Math.min(15_000, durationMs / 5);
const logDir = mkdtempSync(join(tmpdir(), 'onto-chaos-'));
const say = (line: string) => process.stderr.write(`[chaos ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

// ---------------------------------------------------------------- processes
const children = new Set<ChildProcess>();
/** Kills what the run started and was not stopped yet (the private broker among them): sync, for 'exit'. */
const onExit: (() => void)[] = [
  () => {
    for (const c of children) c.kill('SIGKILL');
  },
];
/** Removes what the run made (databases, topics), when it is stopped from outside. */
const onSignal: (() => Promise<void>)[] = [];
process.on('exit', () => {
  for (const f of onExit) f();
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    say(`${signal}: stopping`);
    for (const f of onExit) f();
    const cleaned = Promise.allSettled(onSignal.map((f) => f()));
    void Promise.race([cleaned, sleep(10_000)]).then(() => process.exit(130));
  });
}
// A reader that went away (a test that timed out) must not turn each line into a crash.
process.stdout.on('error', () => {});
process.stderr.on('error', () => {});

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** The compiled server when the workspace is built (CI), else the source through tsx. */
function serverArgs(name: string): string[] {
  const dist = join(repo, 'services', name, 'dist', 'server.js');
  if (existsSync(dist)) return [dist];
  return ['--conditions=@onto/source', '--import', 'tsx', join(repo, 'services', name, 'src', 'server.ts')];
}

type ServiceName = 'control' | 'data' | 'intelligence';

/** One instance of a service: a process on a fixed port, which the faults kill and start again. */
class Instance {
  child?: ChildProcess;
  starts = 0;
  /** Killed by a fault and not ready again yet. */
  starting = false;
  constructor(
    readonly name: ServiceName,
    readonly n: number,
    readonly port: number,
    private readonly env: Record<string, string>,
  ) {}
  get label() {
    return `${this.name}-${this.n}`;
  }
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }
  async start(): Promise<void> {
    const log = openSync(join(logDir, `${this.label}.log`), 'a');
    const child = spawn(process.execPath, serverArgs(this.name), {
      cwd: repo,
      env: { ...process.env, HOST: '127.0.0.1', PORT: String(this.port), LOG_LEVEL: 'warn', ...this.env },
      stdio: ['ignore', log, log],
    });
    this.child = child;
    this.starts++;
    children.add(child);
    child.once('exit', () => children.delete(child));
    const deadline = Date.now() + 120_000;
    for (;;) {
      // degraded (200) is ready enough: a restart may meet the broker or Redis down.
      const ok = await fetch(`${this.url}/ready`, { signal: AbortSignal.timeout(3000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return;
      if (child.exitCode !== null) throw new Error(`${this.label} exited during start-up: see ${logDir}`);
      if (Date.now() > deadline) throw new Error(`${this.label} not ready after 120 s: see ${logDir}`);
      await sleep(250);
    }
  }
  async kill(signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill(signal);
    await exited(child);
    this.child = undefined;
  }
}

/** A Redis of the run's own, so that stopping and flushing it touches no one else's data. */
class PrivateRedis {
  child?: ChildProcess;
  constructor(readonly port: number) {}
  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }
  async start() {
    const child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: 'ignore',
      },
    );
    this.child = child;
    children.add(child);
    child.once('exit', () => children.delete(child));
    for (let i = 0; i < 100; i++) {
      const pong = await run('redis-cli', ['-p', String(this.port), 'ping']).then(
        (r) => r.stdout.trim() === 'PONG',
        () => false,
      );
      if (pong) return;
      await sleep(100);
    }
    throw new Error('the private redis-server did not answer');
  }
  async stop() {
    const child = this.child;
    if (!child) return;
    child.kill('SIGKILL');
    await exited(child);
    this.child = undefined;
  }
  async flush() {
    await run('redis-cli', ['-p', String(this.port), 'FLUSHALL']);
  }
}

// ---------------------------------------------------------------- HTTP client
type Outcome = 'ok' | 'refused' | 'unknown';
interface Answer {
  outcome: Outcome;
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: answers are read field by field
  json: any;
  headers?: Headers;
}

/** Whether the request never reached a server (nothing can have been applied). */
function notSent(error: unknown): boolean {
  const code = (error as { cause?: { code?: string } })?.cause?.code;
  return code === 'ECONNREFUSED' || code === 'ECONNRESET_BEFORE_SEND';
}

let token = '';
/** When each request of the workload was acknowledged, and each record of the broker probe. */
const ackTimes: number[] = [];
const probeAckTimes: number[] = [];
const stats = { requests: 0, acknowledged: 0, refused: 0, unknown: 0, retriedElsewhere: 0 };

/**
 * One request to either instance of a service. A connection refused (the instance is down) is
 * tried on the other, for a bounded time; anything else is final: 2xx acknowledged, 4xx refused
 * (nothing applied), 5xx or a broken connection unknown (it may or may not have been applied).
 */
async function call(
  instances: Instance[],
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string>; ndjson?: string; count?: boolean } = {},
): Promise<Answer> {
  const first = rand(instances.length);
  const deadline = Date.now() + 30_000;
  for (let attempt = 0; ; attempt++) {
    const instance = instances[(first + attempt) % instances.length] as Instance;
    try {
      const res = await fetch(instance.url + path, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...(opts.ndjson !== undefined ? { 'content-type': 'application/x-ndjson' } : {}),
          ...opts.headers,
        },
        body: opts.ndjson ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body)),
        signal: AbortSignal.timeout(15_000),
      });
      const text = await res.text();
      let json: unknown = null;
      try {
        json = text ? JSON.parse(text) : null;
      } catch {
        json = text;
      }
      const outcome: Outcome = res.status < 300 ? 'ok' : res.status < 500 ? 'refused' : 'unknown';
      if (opts.count !== false) {
        stats.requests++;
        stats[outcome === 'ok' ? 'acknowledged' : outcome]++;
        if (outcome === 'ok') ackTimes.push(Date.now());
      }
      return { outcome, status: res.status, json, headers: res.headers };
    } catch (error) {
      if (notSent(error) && Date.now() < deadline) {
        stats.retriedElsewhere++;
        await sleep(Math.min(1000, 50 * 2 ** Math.min(attempt, 5)));
        continue;
      }
      if (opts.count !== false) {
        stats.requests++;
        stats.unknown++;
      }
      return { outcome: 'unknown', status: 0, json: String(error) };
    }
  }
}

/** A read, retried until it answers 2xx or 404 (reads change nothing), for at most `ms`. */
async function read(instances: Instance[], path: string, ms = 60_000): Promise<Answer> {
  const deadline = Date.now() + ms;
  for (;;) {
    const a = await call(instances, 'GET', path, { count: false });
    if (a.outcome === 'ok' || a.status === 404) return a;
    if (Date.now() > deadline) throw new Error(`GET ${path}: ${a.status} ${JSON.stringify(a.json)}`);
    await sleep(300);
  }
}

// ---------------------------------------------------------------- the workload's ledger
/** One write of an object, with what its answer said. */
interface Write {
  seq: number;
  op: 'put' | 'put-if-match' | 'patch' | 'delete' | 'bulk' | 'action';
  outcome: Outcome;
  version?: number;
  deleted: boolean;
}
const ledger = new Map<string, Write[]>(); // pk → its writes in order (one writer per pk)
const linkLedger = new Map<string, { group: string | null; outcome: Outcome }[]>(); // item pk → link writes
const bulks: { pks: string[]; outcome: Outcome }[] = [];
const actions: { key: string; pk: string; outcomes: Outcome[] }[] = [];
const schemaChanges: { name: string; outcome: Outcome }[] = [];
const poison: string[] = [];
let nextSeq = 1;

/** The list `map` holds for `key`, made empty when there is none. */
function listOf<K, V>(map: Map<K, V[]>, key: K): V[] {
  const list = map.get(key) ?? [];
  map.set(key, list);
  return list;
}

function record(pk: string, w: Write) {
  const list = listOf(ledger, pk);
  list.push(w);
}

/** The clients without Kafka (issue 31): an SSE subscriber on either data instance, a webhook receiver. */
const sse = new SseWatch(
  () => dataInstances.map((i) => i.url),
  `/v1/worlds/${WORLD}/events?topics=objects`,
  () => token,
);
const receiver = new WebhookReceiver();

// ---------------------------------------------------------------- main
async function main(): Promise<number> {
  const endpoints = testEndpoints();
  say(
    `logs in ${logDir}; ${minutes} min, PostgreSQL fault: ${pgRestart ? 'server restart' : 'terminate connections'}${pgReplica ? ', with the read replica' : ''}`,
  );
  if (pgReplica) await checkReplica(pgReplica);
  const started = Date.now();
  // The broker takes longest to start: the databases and Redis meanwhile.
  const redis = new PrivateRedis(await freePort());
  const [kafka, dbList] = await Promise.all([
    startPrivateKafka({ readyTimeoutMs: 300_000, nodes: brokerNodes }),
    Promise.all(
      [controlMigrations, dataMigrations, intelligenceMigrations].map((m) =>
        createTestDatabase(endpoints.postgresUrl, m),
      ),
    ),
    redis.start(),
  ]);
  onExit.push(() => void kafka.stop());
  const [controlDb, dataDb, intelligenceDb] = dbList as [TestDatabase, TestDatabase, TestDatabase];
  const dbs: Record<ServiceName, TestDatabase> = { control: controlDb, data: dataDb, intelligence: intelligenceDb };
  onSignal.push(...dbList.map((db) => () => db.drop()));
  const topics = await createTestTopics(kafka.brokers, 3);
  const prefix = topics.prefix;
  const common = {
    REDIS_URL: redis.url,
    KAFKA_BROKERS: kafka.brokers,
    ONTO_TOPIC_PREFIX: prefix,
    ONTO_EVENT_CONTRACT_CHECKS: 'on',
    POSITION_ANNOUNCE_MS: '1000',
    ...testIdentityEnv(),
  };
  const stack: Record<ServiceName, Instance[]> = { control: [], data: [], intelligence: [] };
  for (const name of ['control', 'data', 'intelligence'] as const) {
    for (const n of [1, 2]) {
      stack[name].push(
        new Instance(name, n, await freePort(), {
          ...common,
          DATABASE_URL: dbs[name].url,
          // The checker every 30 s, not 5 min: its repairs (recounts that re-announce every object)
          // run during the faults too, and the clients must take them as re-statements.
          ...(name === 'control' ? { ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP, CHECKER_INTERVAL_MS: '30000' } : {}),
          ...(pgReplica && name !== 'control' ? { DATABASE_REPLICA_URLS: onReplica(dbs[name].url) } : {}),
          // The webhook receiver listens on 127.0.0.1; its retries are quick enough for a short run.
          ...(name === 'data'
            ? { ONTO_WEBHOOK_ALLOW_HOSTS: '127.0.0.1', WEBHOOK_RETRY_BASE_MS: '200', WEBHOOK_RETRY_MAX_MS: '2000' }
            : {}),
        }),
      );
    }
  }
  const all = Object.values(stack).flat();
  dataInstances = stack.data;
  const pools = new Map<ServiceName, pg.Pool>(
    (Object.keys(dbs) as ServiceName[]).map((n) => [n, new pg.Pool({ connectionString: dbs[n].url, max: 2 })]),
  );
  for (const p of pools.values()) p.on('error', () => {}); // the PostgreSQL fault ends these too
  try {
    say('starting two instances of each service');
    // control first (the others take its identity heartbeat), then the rest side by side
    await Promise.all(stack.control.map((i) => i.start()));
    await Promise.all([...stack.data, ...stack.intelligence].map((i) => i.start()));
    const login = await call(stack.control, 'POST', '/v1/auth/token', { body: { apiToken: BOOTSTRAP }, count: false });
    if (login.outcome !== 'ok') throw new Error(`token: ${JSON.stringify(login.json)}`);
    token = login.json.accessToken;
    const refresh = setInterval(async () => {
      const a = await call(stack.control, 'POST', '/v1/auth/token', { body: { apiToken: BOOTSTRAP }, count: false });
      if (a.outcome === 'ok') token = a.json.accessToken;
    }, 300_000);
    try {
      await setUp(stack);
      const faults = new Faults(stack, kafka, redis, dbs, endpoints.postgresUrl, prefix);
      const producer = new Kafka({ brokers: kafka.brokers.split(','), logLevel: logLevel.NOTHING }).producer();
      // Records no consumer can decode, on intelligence's input: the DLQ's expected content.
      const sendPoison = async (n: number) => {
        const messages = Array.from({ length: n }, () => {
          const key = `${WORLD}/poison/${poison.length}`;
          poison.push(key);
          return { key, value: `{"poison":true,"n":${poison.length}}` };
        });
        const deadline = Date.now() + 300_000;
        for (;;) {
          try {
            await producer.connect();
            await producer.send({ topic: `${prefix}onto.changes.objects`, messages });
            await producer.disconnect();
            return;
          } catch (error) {
            await producer.disconnect().catch(() => {});
            if (Date.now() > deadline) throw error; // the broker fault lasts seconds; its restart, on a busy machine, a minute or two
            await sleep(1000);
          }
        }
      };
      await sendPoison(2);
      const workloadStart = Date.now();
      const stopAt = workloadStart + durationMs;
      say(`workload and faults for ${Math.round(durationMs / 1000)} s`);
      const workers = [
        ...Array.from({ length: 6 }, (_, w) => objectWorker(stack.data, w, stopAt)),
        linkWorker(stack.data, stopAt),
        bulkWorker(stack.data, stopAt),
        actionWorker(stack.intelligence, stopAt),
        schemaWorker(stack.control, stopAt, durationMs),
        faults.schedule(stopAt - calmMs),
        brokerProbe(kafka, `${prefix}chaos.probe`, stopAt),
        (async () => {
          await sleep(durationMs / 2);
          await sendPoison(1);
        })(),
      ];
      await Promise.all(workers);
      say(
        `workload done: ${stats.acknowledged} acknowledged, ${stats.unknown} unknown; faults ${JSON.stringify(faults.count)}`,
      );
      const checkStart = Date.now();
      const table = await check(stack, pools, kafka, prefix, faults);
      table.counts['longest gap between acknowledgements through each broker fault, ms (probe records / requests)'] =
        faults.windows
          .map(
            (w) =>
              `${w.kind} ${longestGap(probeAckTimes, w.from, w.to + 5000)} / ${longestGap(ackTimes, w.from, w.to + 5000)}`,
          )
          .join(', ') || 'no broker fault';
      table.counts['brokers (replication factor)'] = `${kafka.nodes.length} (${kafka.nodes.length === 3 ? 3 : 1})`;
      table.counts['read replica (data and intelligence)'] = pgReplica ? 'yes' : 'no';
      const seconds = (from: number, to: number) => Math.round((to - from) / 1000);
      table.counts['seconds: start-up / workload / drain and checks'] =
        `${seconds(started, workloadStart)} / ${seconds(workloadStart, checkStart)} / ${seconds(checkStart, Date.now())}`;
      return report(table);
    } finally {
      clearInterval(refresh);
    }
  } finally {
    await sse.close();
    await receiver.close();
    for (const p of pools.values()) await p.end().catch(() => {});
    await Promise.all(all.map((i) => i.kill('SIGKILL')));
    await redis.stop();
    for (const db of Object.values(dbs)) await db.drop().catch(() => {});
    await topics.drop().catch(() => {});
    await kafka.close();
  }
}

// ---------------------------------------------------------------- set-up
const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', indexed: true },
    status: { type: { type: 'enum', values: ['open', 'closed'] } },
    seq: { type: 'integer' },
  },
};
const Group = { displayName: 'Group', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const GROUPS = 4;
const LINKED = 24;

async function schemaVersion(control: Instance[]): Promise<number> {
  return (await read(control, `/v1/worlds/${WORLD}/schema`)).json.version;
}

async function must(a: Promise<Answer>, what: string): Promise<Answer> {
  const answer = await a;
  if (answer.outcome !== 'ok') throw new Error(`${what}: ${answer.status} ${JSON.stringify(answer.json)}`);
  return answer;
}

async function waitFor(what: string, probe: () => Promise<boolean>, ms: number) {
  const deadline = Date.now() + ms;
  while (!(await probe().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(250);
  }
}

async function setUp(stack: Record<ServiceName, Instance[]>) {
  await must(call(stack.control, 'POST', '/v1/worlds', { body: { id: WORLD }, count: false }), 'world');
  await waitFor(
    'the world to be READY',
    async () => (await read(stack.control, `/v1/worlds/${WORLD}`)).json.status === 'READY',
    120_000,
  );
  const types: [string, unknown][] = [
    ['object-types/Item', Item],
    ['object-types/Group', Group],
    ['link-types/members', { displayName: 'members', from: 'Group', to: 'Item', cardinality: 'ONE_TO_MANY' }],
    [
      'action-types/close',
      {
        displayName: 'Close an item',
        parameters: { item: { type: 'string', required: true } },
        edits: [
          { op: 'modifyObject', objectType: 'Item', pk: { param: 'item' }, values: { status: { value: 'closed' } } },
        ],
      },
    ],
  ];
  for (const [path, body] of types) {
    const v = await schemaVersion(stack.control);
    await must(
      call(stack.control, 'PUT', `/v1/worlds/${WORLD}/${path}`, {
        body,
        headers: { 'if-match': `"${v}"` },
        count: false,
      }),
      path,
    );
  }
  const version = await schemaVersion(stack.control);
  await waitFor(
    'data and intelligence at the schema',
    async () =>
      (await read(stack.data, `/v1/worlds/${WORLD}/schema-version`)).json.version >= version &&
      (await read(stack.intelligence, `/v1/worlds/${WORLD}/watermarks`)).json.schemaVersion >= version,
    60_000,
  );
  // The live clients start before the first write the ledger records.
  const hook = await must(
    call(stack.data, 'PUT', `/v1/worlds/${WORLD}/webhooks/chaos`, {
      body: { url: await receiver.start(), events: ['object.created', 'object.updated', 'object.deleted'] },
      count: false,
    }),
    'webhook',
  );
  receiver.secret = hook.json.secret;
  await Promise.race([
    sse.start(),
    sleep(60_000).then(() => {
      throw new Error('the SSE subscriber could not connect to data');
    }),
  ]);
  const definitions: [string, unknown][] = [
    ['derived-properties/double', { objectType: 'Item', expression: 'self.amount * 2', maxStalenessMs: 2000 }],
    [
      'derived-properties/total',
      {
        objectType: 'Group',
        expression: 'agg.sum',
        aggregates: { sum: { function: 'sum', linkType: 'members', property: 'amount' } },
        maxStalenessMs: 2000,
      },
    ],
    ['rules/big', { objectType: 'Item', condition: 'self.amount >= 900', alertType: 'big', severity: 'info' }],
  ];
  for (const [path, body] of definitions) {
    await must(call(stack.intelligence, 'PUT', `/v1/worlds/${WORLD}/${path}`, { body, count: false }), path);
  }
  for (let g = 0; g < GROUPS; g++) {
    await must(
      call(stack.data, 'PUT', `/v1/worlds/${WORLD}/objects/Group/g-${g}`, { body: { properties: {} }, count: false }),
      'group',
    );
  }
  for (let l = 0; l < LINKED; l++) {
    const seq = nextSeq++;
    const a = await must(
      call(stack.data, 'PUT', `/v1/worlds/${WORLD}/objects/Item/l-${l}`, {
        body: { properties: { amount: rand(1000), status: 'open', seq } },
      }),
      'linked item',
    );
    record(`l-${l}`, { seq, op: 'put', outcome: 'ok', version: a.json.version, deleted: false });
  }
}

// ---------------------------------------------------------------- workers
const objectPath = (pk: string) => `/v1/worlds/${WORLD}/objects/Item/${pk}`;

/** What data holds for pk now (after a write whose outcome is unknown), or undefined if it does not answer. */
async function current(data: Instance[], pk: string): Promise<{ exists: boolean; version: number } | undefined> {
  try {
    const a = await read(data, objectPath(pk), 30_000);
    return a.status === 404 ? { exists: false, version: 0 } : { exists: true, version: a.json.version };
  } catch {
    return undefined;
  }
}

/** Writes to its own keys, one at a time each, so that every key's writes have one order. */
async function objectWorker(data: Instance[], w: number, stopAt: number) {
  const known = new Map<string, { exists: boolean; version: number } | undefined>();
  while (Date.now() < stopAt) {
    const pk = `i-${w}-${rand(15)}`;
    let state = known.get(pk);
    if (!known.has(pk)) state = { exists: false, version: 0 };
    if (state === undefined) state = await current(data, pk);
    if (state === undefined) continue;
    const seq = nextSeq++;
    const amount = rand(1000);
    const roll = Math.random();
    let op: Write['op'];
    let a: Answer;
    if (!state.exists || roll < 0.3) {
      const ifMatch = state.exists && roll < 0.15;
      op = ifMatch ? 'put-if-match' : 'put';
      a = await call(data, 'PUT', objectPath(pk), {
        body: { properties: { amount, status: 'open', seq } },
        headers: ifMatch ? { 'if-match': `"${state.version}"` } : {},
      });
    } else if (roll < 0.9) {
      op = 'patch';
      a = await call(data, 'PATCH', objectPath(pk), {
        body: { properties: { amount, seq } },
        headers: roll < 0.6 ? { 'if-match': `"${state.version}"` } : {},
      });
    } else {
      op = 'delete';
      a = await call(data, 'DELETE', objectPath(pk));
    }
    const version =
      a.outcome !== 'ok'
        ? undefined
        : op === 'delete'
          ? Number(a.headers?.get('etag')?.replaceAll('"', ''))
          : a.json.version;
    record(pk, { seq, op, outcome: a.outcome, version, deleted: op === 'delete' });
    // after anything but an acknowledgement, the key's state is read again before its next write
    known.set(pk, a.outcome === 'ok' ? { exists: op !== 'delete', version: version ?? 0 } : undefined);
  }
}

/** Links the linked items to groups and unlinks them, and changes their amounts (the groups' totals). */
async function linkWorker(data: Instance[], stopAt: number) {
  const linked = new Map<string, string | null>();
  while (Date.now() < stopAt) {
    const pk = `l-${rand(LINKED)}`;
    if (Math.random() < 0.5) {
      const seq = nextSeq++;
      const a = await call(data, 'PATCH', objectPath(pk), { body: { properties: { amount: rand(1000), seq } } });
      record(pk, { seq, op: 'patch', outcome: a.outcome, version: a.json?.version, deleted: false });
      continue;
    }
    const group = linked.get(pk) ?? null;
    const target = group === null ? `g-${rand(GROUPS)}` : null;
    const a =
      target === null
        ? await call(data, 'DELETE', `/v1/worlds/${WORLD}/links/members/${group}/${pk}`)
        : await call(data, 'PUT', `/v1/worlds/${WORLD}/links/members/${target}/${pk}`);
    const list = listOf(linkLedger, pk);
    list.push({ group: target, outcome: a.outcome });
    if (a.outcome === 'ok') linked.set(pk, target);
    else {
      // learn the link's state again from data before the next change of this item's link
      const page = await read(data, `/v1/worlds/${WORLD}/objects/Item/${pk}/links/members`).catch(() => undefined);
      linked.set(pk, page === undefined ? null : (linkedGroup(page.json) ?? null));
    }
  }
}

// biome-ignore lint/suspicious/noExplicitAny: a links page, read field by field
function linkedGroup(page: any): string | undefined {
  const objects = page?.objects ?? page?.links ?? [];
  return objects[0]?.pk;
}

/** Bulk requests of fresh keys: each is all or nothing. */
async function bulkWorker(data: Instance[], stopAt: number) {
  for (let b = 0; Date.now() < stopAt; b++) {
    const pks = Array.from({ length: 10 }, (_, j) => `b-${b}-${j}`);
    const lines = pks.map((pk) =>
      JSON.stringify({ properties: { id: pk, amount: rand(1000), status: 'open', seq: nextSeq++ } }),
    );
    const a = await call(data, 'POST', `/v1/worlds/${WORLD}/bulk/Item`, { ndjson: `${lines.join('\n')}\n` });
    bulks.push({ pks, outcome: a.outcome });
    await sleep(300);
  }
}

/** Actions with an Idempotency-Key, each sent twice (to either instance): each must run once. */
async function actionWorker(intelligence: Instance[], stopAt: number) {
  for (let n = 0; Date.now() < stopAt; n++) {
    const pk = `a-${n}`;
    const seq = nextSeq++;
    const created = await call(data_(), 'PUT', objectPath(pk), {
      body: { properties: { amount: 1, status: 'open', seq } },
    });
    record(pk, { seq, op: 'put', outcome: created.outcome, version: created.json?.version, deleted: false });
    if (created.outcome !== 'ok') continue;
    const key = `chaos-action-${n}`;
    // intelligence waits (bounded) until it holds the object the action edits
    const token = created.headers?.get('x-consistency-token');
    const consistency: Record<string, string> = token ? { 'x-consistency-token': token } : {};
    const entry = { key, pk, outcomes: [] as Outcome[] };
    actions.push(entry);
    for (let i = 0; i < 2; i++) {
      const a = await call(intelligence, 'POST', `/v1/worlds/${WORLD}/actions/close`, {
        body: { parameters: { item: pk } },
        headers: { 'idempotency-key': key, ...consistency },
      });
      entry.outcomes.push(a.outcome);
      await sleep(rand(500));
    }
  }
}
let dataInstances: Instance[] = [];
const data_ = () => dataInstances;

/** A new object type now and then, based on the version read (a 412 when another change won). */
async function schemaWorker(control: Instance[], stopAt: number, duration: number) {
  for (let n = 0; Date.now() < stopAt; n++) {
    await sleep(Math.max(3000, duration / 12));
    if (Date.now() >= stopAt) break;
    const v = await read(control, `/v1/worlds/${WORLD}/schema`).catch(() => undefined);
    if (!v) continue;
    const name = `Extra${n}`;
    const a = await call(control, 'PUT', `/v1/worlds/${WORLD}/object-types/${name}`, {
      body: { displayName: name, primaryKey: 'id', properties: { id: { type: 'string', required: true } } },
      headers: { 'if-match': `"${v.json.version}"` },
    });
    schemaChanges.push({ name, outcome: a.outcome });
  }
}

// ---------------------------------------------------------------- faults
type FaultKind =
  | 'sigkill'
  | 'rebalance'
  | 'broker'
  | 'broker-leader-kill'
  | 'broker-rolling-restart'
  | 'postgres'
  | 'redis-stop'
  | 'redis-flush'
  | 'replica-pause';
const BROKER_FAULTS: FaultKind[] = ['broker', 'broker-leader-kill', 'broker-rolling-restart'];

/** The longest pause between two acknowledgements from `from` to `to` (ms). */
function longestGap(times: number[], from: number, to: number): number {
  let longest = 0;
  let previous: number | undefined;
  for (const t of times) {
    if (t < from) {
      previous = t;
      continue;
    }
    if (t > to) {
      if (previous !== undefined) longest = Math.max(longest, t - previous);
      break;
    }
    if (previous !== undefined) longest = Math.max(longest, t - previous);
    previous = t;
  }
  return longest;
}

class Faults {
  count: Record<FaultKind, number> = {
    sigkill: 0,
    rebalance: 0,
    broker: 0,
    'broker-leader-kill': 0,
    'broker-rolling-restart': 0,
    postgres: 0,
    'redis-stop': 0,
    'redis-flush': 0,
    'replica-pause': 0,
  };
  constructor(
    private readonly stack: Record<ServiceName, Instance[]>,
    private readonly kafka: PrivateKafka,
    private readonly redis: PrivateRedis,
    private readonly dbs: Record<ServiceName, TestDatabase>,
    private readonly serverUrl: string,
    private readonly prefix: string,
  ) {}
  /** When each broker fault began and ended: the gaps of acknowledgements are measured over them. */
  readonly windows: { kind: FaultKind; from: number; to: number }[] = [];

  /** Instances being started again in the background after a kill. */
  private readonly restarting = new Set<Promise<void>>();
  private readonly failures: unknown[] = [];

  /**
   * One fault after another, a few seconds apart. Each kind comes once in the first round (a
   * short run still meets them all), then kills come twice as often as the rest.
   */
  async schedule(until: number) {
    const first: FaultKind[] = ['sigkill', 'postgres', 'broker', 'rebalance', 'redis-flush', 'redis-stop'];
    const then: FaultKind[] = [
      'sigkill',
      'broker',
      'sigkill',
      'postgres',
      'rebalance',
      'redis-stop',
      'sigkill',
      'redis-flush',
    ];
    // On three brokers: one broker killed, and a rolling restart, early and then in every round.
    if (this.kafka.nodes.length === 3) {
      first.splice(1, 0, 'broker-leader-kill');
      first.splice(4, 0, 'broker-rolling-restart');
      then.splice(2, 0, 'broker-leader-kill');
      then.splice(6, 0, 'broker-rolling-restart');
    }
    // With the read replica: its replay paused, once early and then in every round.
    if (pgReplica) {
      first.splice(2, 0, 'replica-pause');
      then.splice(4, 0, 'replica-pause');
    }
    await sleep(2000);
    for (let i = 0; Date.now() < until; i++) {
      const kind = (i < first.length ? first[i] : then[(i - first.length) % then.length]) as FaultKind;
      const from = Date.now();
      if (await this.inject(kind)) this.count[kind]++;
      if (BROKER_FAULTS.includes(kind)) this.windows.push({ kind, from, to: Date.now() });
      await sleep(1000 + rand(2000));
    }
    await this.settled();
  }

  /** The node leading the most partitions of the run's topics, as the cluster's metadata says. */
  private async busiestBroker() {
    const admin = new Kafka({ brokers: this.kafka.brokers.split(','), logLevel: logLevel.NOTHING }).admin();
    try {
      await admin.connect();
      const topics = (await admin.listTopics()).filter((t) => t.startsWith(this.prefix));
      const { topics: metadata } = await admin.fetchTopicMetadata({ topics });
      const leads = new Map<number, number>();
      for (const t of metadata) for (const p of t.partitions) leads.set(p.leader, (leads.get(p.leader) ?? 0) + 1);
      const [leader] = [...leads].sort((a, b) => b[1] - a[1])[0] ?? [];
      return this.kafka.nodes.find((n) => n.nodeId === leader && n.running());
    } catch {
      return this.kafka.nodes.find((n) => n.running());
    } finally {
      await admin.disconnect().catch(() => {});
    }
  }

  /** Waits for the instances being restarted: the stack is whole again. */
  async settled() {
    while (this.restarting.size > 0) await Promise.all([...this.restarting]);
    if (this.failures.length > 0) throw this.failures[0];
  }

  /** An instance whose sibling runs, so that each service keeps answering through a kill. */
  private victim(): Instance | undefined {
    const candidates = Object.values(this.stack).flatMap((pair) =>
      pair.every((i) => i.child !== undefined && !i.starting) ? pair : [],
    );
    return candidates[rand(candidates.length)];
  }

  /** Injects one fault; false when there was nothing to do it to (every service short of an instance). */
  async inject(kind: FaultKind): Promise<boolean> {
    say(`fault: ${kind}`);
    switch (kind) {
      case 'sigkill':
      case 'rebalance': {
        // SIGKILL: a crash wherever the process is. SIGTERM: a clean leave, a consumer-group
        // rebalance with batches in flight. Both start again in the background and rejoin.
        const instance = this.victim();
        if (!instance) return false;
        say(`  ${kind === 'sigkill' ? 'SIGKILL' : 'SIGTERM'} ${instance.label}`);
        instance.starting = true;
        await instance.kill(kind === 'sigkill' ? 'SIGKILL' : 'SIGTERM');
        const restart = sleep(500 + rand(1500))
          .then(() => instance.start())
          .catch((error: unknown) => {
            this.failures.push(error);
          })
          .finally(() => {
            instance.starting = false;
            this.restarting.delete(restart);
          });
        this.restarting.add(restart);
        return true;
      }
      case 'broker':
        await this.kafka.stop();
        await sleep(4000 + rand(4000));
        await this.kafka.start();
        return true;
      case 'broker-leader-kill': {
        // The broker that leads the most partitions of the run's topics, SIGKILLed; back 4-8 s later.
        const victim = await this.busiestBroker();
        if (!victim) return false;
        say(`  SIGKILL broker ${victim.nodeId}`);
        await victim.stop();
        await sleep(4000 + rand(4000));
        victim.start();
        await this.kafka.whole();
        return true;
      }
      case 'broker-rolling-restart':
        // One broker at a time, each stopped cleanly (controlled shutdown moves its leaders away)
        // and back in the cluster before the next: an upgrade's restart.
        for (const node of this.kafka.nodes) {
          say(`  restarting broker ${node.nodeId}`);
          await node.stop('SIGTERM');
          node.start();
          await this.kafka.whole();
        }
        return true;
      case 'postgres':
        if (pgRestart) {
          const version = (await run('ls', ['/etc/postgresql'])).stdout.trim().split('\n').sort().at(-1) ?? '';
          await run('pg_ctlcluster', ['--skip-systemctl-redirect', version, 'main', 'restart']);
        } else {
          const admin = new pg.Client({ connectionString: this.serverUrl });
          await admin.connect();
          try {
            await admin.query(
              'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ANY($1) AND pid <> pg_backend_pid()',
              [Object.values(this.dbs).map((d) => d.name)],
            );
          } finally {
            await admin.end();
          }
        }
        return true;
      case 'redis-stop':
        await this.redis.stop();
        await sleep(3000 + rand(3000));
        await this.redis.start();
        return true;
      case 'redis-flush':
        await this.redis.flush();
        return true;
      case 'replica-pause': {
        // Reads with a token wait for the replica, then go to the primary; reads without one may
        // be served a few seconds old (docs/adr/0080). Resumed on every way out.
        const replica = new pg.Client({ connectionString: pgReplica });
        replica.on('error', () => {});
        await replica.connect();
        try {
          await replica.query('SELECT pg_wal_replay_pause()');
          await sleep(2000 + rand(4000));
        } finally {
          await replica.query('SELECT pg_wal_replay_resume()').catch(() => {});
          await replica.end().catch(() => {});
        }
        return true;
      }
    }
  }
}

/** Refuses a replica URL that does not answer or is not a replica (exit 2, the run itself broke). */
async function checkReplica(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    const { rows } = await client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r');
    if (!rows[0]?.r) throw new Error('pg_is_in_recovery() is false: a primary, not a replica');
    // A pause left by a run that was killed would hold every read with a token.
    await client.query('SELECT pg_wal_replay_resume()');
  } catch (error) {
    process.stderr.write(`--pg-replica ${url}: ${(error as Error).message} (./onto up --pg-replica starts one)\n`);
    process.exit(2);
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * A producer as the relay's (acks=all, idempotent) sending one record at a time to a topic of its
 * own until the workload stops, each sent again until acknowledged: when each was acknowledged
 * shows how long a broker fault stopped writes to Kafka (the leader election's pause).
 */
async function brokerProbe(kafka: PrivateKafka, topic: string, stopAt: number): Promise<void> {
  const broker = createKafkaBroker({ brokers: kafka.brokers.split(','), clientId: 'chaos-probe', logger: testLogger });
  const admin = await broker.admin();
  await admin.ensureTopics([{ name: topic, partitions: 3 }]);
  await admin.disconnect();
  const producer = await broker.producer();
  try {
    for (let seq = 0; Date.now() < stopAt; ) {
      try {
        await producer.send([{ topic, messages: [{ key: String(seq % 3), value: String(seq) }] }]);
        probeAckTimes.push(Date.now());
        seq++;
        await sleep(20);
      } catch {
        await sleep(100);
      }
    }
  } finally {
    await producer.disconnect().catch(() => {});
  }
}

// ---------------------------------------------------------------- checks
interface Row {
  check: string;
  checked: number;
  violations: number;
  detail: string;
}
interface Table {
  rows: Row[];
  counts: Record<string, number | string>;
  faults: Record<string, number>;
}

async function check(
  stack: Record<ServiceName, Instance[]>,
  pools: Map<ServiceName, pg.Pool>,
  kafka: PrivateKafka,
  prefix: string,
  faults: Faults,
): Promise<Table> {
  const rows: Row[] = [];
  const row = (check: string, checked: number, bad: string[]) => {
    rows.push({ check, checked, violations: bad.length, detail: bad.slice(0, 5).join('; ') });
    if (bad.length) say(`VIOLATION ${check}: ${bad.slice(0, 10).join('; ')}`);
  };
  const q = async (svc: ServiceName, sql: string, params: unknown[] = []) => {
    for (let i = 0; ; i++) {
      try {
        return (await (pools.get(svc) as pg.Pool).query(sql, params)).rows;
      } catch (error) {
        if (i > 20) throw error;
        await sleep(500);
      }
    }
  };

  const outboxesEmpty = async () => {
    for (const svc of ['control', 'data', 'intelligence'] as const) {
      const [r] = await q(svc, 'SELECT count(*)::int AS n FROM outbox_pending');
      if (r.n > 0) return false;
    }
    return true;
  };
  const running = async () =>
    (
      await q(
        'intelligence',
        `SELECT count(*)::int AS n FROM actions WHERE world_id = $1 AND status IN ('RUNNING','COMPENSATING')`,
        [WORLD],
      )
    )[0].n as number;
  say('draining: waiting for every outbox to empty');
  await waitFor('the outboxes to drain', outboxesEmpty, 180_000);

  // An action's step reaches data through Kafka after intelligence's outbox has emptied, and a
  // step retried after a kill lands later still: data is read only once no action is running,
  // and once the outboxes its replies went through have emptied again.
  const actionBad: string[] = [];
  const stillRunning = await running();
  if (stillRunning > 0) say(`${stillRunning} action(s) still running after the outboxes drained: waiting for them`);
  await waitFor('the actions to finish', async () => (await running()) === 0, 60_000).catch((e) =>
    actionBad.push(String(e)),
  );
  await waitFor('the outboxes to drain again', outboxesEmpty, 60_000);

  // 1. data: every acknowledged write at its version or a later one; nothing refused applied
  const heads = new Map<string, { version: number; seq: number; amount: number }>();
  for (let cursor: string | null = ''; cursor !== null; ) {
    const page = await read(
      stack.data,
      `/v1/worlds/${WORLD}/objects/Item?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    for (const o of page.json.objects)
      heads.set(o.pk, { version: o.version, seq: o.properties.seq, amount: o.properties.amount });
    cursor = page.json.next;
  }
  const dataBad: string[] = [];
  let acknowledgedWrites = 0;
  for (const [pk, writes] of ledger) {
    const head = heads.get(pk);
    const lastOk = writes.findLastIndex((w) => w.outcome === 'ok');
    acknowledgedWrites += writes.filter((w) => w.outcome === 'ok').length;
    // the states data may hold: the last acknowledged write's, or one of the unknown ones after it
    const allowed = writes.filter((w, i) => (i === lastOk ? true : i > lastOk && w.outcome === 'unknown'));
    if (lastOk === -1) allowed.unshift({ seq: 0, op: 'delete', outcome: 'ok', deleted: true }); // never written
    const matches = allowed.some((w) =>
      w.deleted
        ? head === undefined
        : head !== undefined &&
          head.seq === w.seq &&
          (w.outcome !== 'ok' || w.version === undefined || head.version >= w.version),
    );
    if (!matches)
      dataBad.push(
        `${pk}: data has ${head ? `seq ${head.seq} v${head.version}` : 'nothing'}, allowed ${allowed.map((w) => (w.deleted ? 'deleted' : `seq ${w.seq}`)).join('|')}`,
      );
    for (const w of writes)
      if (w.outcome === 'refused' && head?.seq === w.seq) dataBad.push(`${pk}: refused write seq ${w.seq} is there`);
  }
  for (const b of bulks) {
    const present = b.pks.filter((pk) => heads.has(pk)).length;
    acknowledgedWrites += b.outcome === 'ok' ? b.pks.length : 0;
    if (b.outcome === 'ok' && present !== b.pks.length)
      dataBad.push(`bulk ${b.pks[0]}…: acknowledged, ${present}/10 there`);
    if (b.outcome === 'refused' && present !== 0) dataBad.push(`bulk ${b.pks[0]}…: refused, ${present}/10 there`);
    if (b.outcome === 'unknown' && present !== 0 && present !== b.pks.length)
      dataBad.push(`bulk ${b.pks[0]}…: half there (${present}/10)`);
  }
  row('acknowledged writes in data, no unacknowledged one half there', ledger.size + bulks.length, dataBad);

  // links: the last acknowledged link change holds, or an unknown one after it
  const links = new Map<string, string | null>();
  const linkBad: string[] = [];
  for (let l = 0; l < LINKED; l++) {
    const pk = `l-${l}`;
    const page = await read(stack.data, `/v1/worlds/${WORLD}/objects/Item/${pk}/links/members`);
    const group = linkedGroup(page.json) ?? null;
    links.set(pk, group);
    const list = linkLedger.get(pk) ?? [];
    const lastOk = list.findLastIndex((x) => x.outcome === 'ok');
    const allowed = [
      lastOk === -1 ? null : list[lastOk]?.group,
      ...list
        .slice(lastOk + 1)
        .filter((x) => x.outcome === 'unknown')
        .map((x) => x.group),
    ];
    if (!allowed.includes(group)) linkBad.push(`${pk}: linked to ${group}, allowed ${allowed.join('|')}`);
  }
  row('acknowledged links in data', LINKED, linkBad);

  // 2. the wire: every acknowledged version on onto.changes.objects, per-key order kept
  const wire = await readTopic(kafka, `${prefix}onto.changes.objects`);
  const byKey = new Map<string, { id: string; version: number }[]>();
  const seen = new Set<string>();
  let duplicates = 0;
  for (const m of wire) {
    let e: { event_id?: string; type?: string; key?: string; version?: number; world_id?: string };
    try {
      e = JSON.parse(m.value);
    } catch {
      continue;
    }
    // object.announced re-states a version already sent (the checker's recount): not a change
    if (!e.event_id || e.world_id !== WORLD || e.type === 'object.announced') continue;
    if (seen.has(e.event_id)) {
      duplicates++;
      continue;
    }
    seen.add(e.event_id);
    const pk = String(e.key).split('/').at(-1) as string;
    const list = listOf(byKey, pk);
    list.push({ id: e.event_id, version: Number(e.version) });
  }
  const wireBad: string[] = [];
  for (const [pk, events] of byKey) {
    for (let i = 1; i < events.length; i++) {
      if ((events[i] as { version: number }).version <= (events[i - 1] as { version: number }).version)
        wireBad.push(`${pk}: v${events[i]?.version} after v${events[i - 1]?.version}`);
    }
  }
  let lostEvents = 0;
  for (const [pk, writes] of ledger) {
    const versions = new Set((byKey.get(pk) ?? []).map((e) => e.version));
    for (const w of writes) {
      if (w.outcome === 'ok' && w.version !== undefined && !Number.isNaN(w.version) && !versions.has(w.version)) {
        lostEvents++;
        wireBad.push(`${pk}: acknowledged v${w.version} (${w.op}) not on the wire`);
      }
    }
  }
  row('every data change on onto.changes.objects, per-key order', seen.size, wireBad);

  // 3. intelligence: read model = data's heads, derived = recomputation, one alert per raise
  say('waiting for intelligence to match data');
  let intelBad: string[] = [];
  const intelDeadline = Date.now() + 120_000;
  const pks = [...new Set([...ledger.keys(), ...bulks.flatMap((b) => b.pks)])];
  for (;;) {
    intelBad = [];
    for (const pk of pks) {
      const a = await read(stack.intelligence, `/v1/worlds/${WORLD}/objects/Item/${pk}`);
      const head = heads.get(pk);
      if (!head) {
        if (a.status !== 404) intelBad.push(`${pk}: deleted in data, v${a.json?.version} in intelligence`);
        continue;
      }
      if (a.status === 404) intelBad.push(`${pk}: v${head.version} in data, missing in intelligence`);
      else if (a.json.version !== head.version)
        intelBad.push(`${pk}: v${head.version} in data, v${a.json.version} in intelligence`);
      else if (a.json.derived?.double?.value !== head.amount * 2)
        intelBad.push(`${pk}: double = ${a.json.derived?.double?.value}, recomputed ${head.amount * 2}`);
    }
    for (let g = 0; g < GROUPS; g++) {
      const expected = [...links]
        .filter(([, group]) => group === `g-${g}`)
        .reduce((s, [pk]) => s + (heads.get(pk)?.amount ?? 0), 0);
      const a = await read(stack.intelligence, `/v1/worlds/${WORLD}/objects/Group/g-${g}`);
      const got = a.json?.derived?.total?.value ?? 0;
      if (got !== expected) intelBad.push(`g-${g}: total = ${got}, recomputed ${expected}`);
    }
    if (intelBad.length === 0 || Date.now() > intelDeadline) break;
    await sleep(2000);
  }
  row('intelligence read model and derived values equal data recomputed', pks.length + GROUPS, intelBad);

  const alertBad: string[] = [];
  const twice = await q(
    'intelligence',
    `SELECT pk, raised_object_version AS v, count(*)::int AS n FROM alerts WHERE world_id = $1 AND rule = 'big'
      GROUP BY pk, raised_object_version HAVING count(*) > 1`,
    [WORLD],
  );
  for (const r of twice) alertBad.push(`${r.pk}: ${r.n} alerts raised at v${r.v}`);
  const open = await q(
    'intelligence',
    `SELECT pk, count(*)::int AS n FROM alerts WHERE world_id = $1 AND rule = 'big' AND status = 'OPEN' GROUP BY pk`,
    [WORLD],
  );
  const openBy = new Map(open.map((r) => [r.pk as string, r.n as number]));
  for (const r of open) if (r.n > 1) alertBad.push(`${r.pk}: ${r.n} open alerts`);
  for (const [pk, head] of heads) {
    const should = head.amount >= 900;
    if (should !== (openBy.get(pk) ?? 0) > 0)
      alertBad.push(`${pk}: amount ${head.amount}, open alert ${openBy.get(pk) ?? 0}`);
  }
  const [raised] = await q('intelligence', `SELECT count(*)::int AS n FROM alerts WHERE world_id = $1`, [WORLD]);
  row('one alert per raise', raised.n, alertBad);

  // 4. every idempotency key ran its action once
  const ran = await q(
    'intelligence',
    `SELECT idempotency_key AS key, count(*)::int AS n, min(status) AS status FROM actions WHERE world_id = $1 GROUP BY 1`,
    [WORLD],
  );
  const ranBy = new Map(ran.map((r) => [r.key as string, r]));
  for (const a of actions) {
    const r = ranBy.get(a.key);
    const acknowledged = a.outcomes.includes('ok');
    if (r && r.n > 1) actionBad.push(`${a.key}: ${r.n} actions`);
    if (acknowledged && !r) actionBad.push(`${a.key}: acknowledged, never ran`);
    if (r && r.status !== 'COMPLETED') actionBad.push(`${a.key}: ${r.status}`);
    const head = heads.get(a.pk);
    // created at v1; the action's one edit makes it v2: a second run would make v3
    if (r?.status === 'COMPLETED' && head?.version !== 2) actionBad.push(`${a.pk}: v${head?.version} after one action`);
  }
  row('every idempotency key ran its action once', actions.length, actionBad);

  // 5. schema changes: every acknowledged one in control, applied by data and intelligence
  const schemaBad: string[] = [];
  const schema = (await read(stack.control, `/v1/worlds/${WORLD}/schema`)).json;
  for (const c of schemaChanges)
    if (c.outcome === 'ok' && !schema.objectTypes[c.name]) schemaBad.push(`${c.name} acknowledged, not in the schema`);
  await waitFor(
    'data and intelligence at the final schema',
    async () =>
      (await read(stack.data, `/v1/worlds/${WORLD}/schema-version`)).json.version === schema.version &&
      (await read(stack.intelligence, `/v1/worlds/${WORLD}/watermarks`)).json.schemaVersion === schema.version,
    60_000,
  ).catch(() => schemaBad.push(`data or intelligence not at schema version ${schema.version}`));
  row('schema changes applied everywhere', schemaChanges.length, schemaBad);

  // 6. the DLQs: the poison events, and nothing else
  const dlqBad: string[] = [];
  const dlqTopics = (await listTopics(kafka)).filter((t) => t.startsWith(prefix) && t.endsWith('.dlq'));
  const dead = (
    await Promise.all(dlqTopics.map(async (t) => (await readTopic(kafka, t)).map((m) => ({ ...m, topic: t }))))
  ).flat();
  const poisoned = new Set(poison);
  for (const m of dead)
    if (!poisoned.has(m.key))
      dlqBad.push(
        `${m.topic}: ${m.key} (${m.headers['onto-error-type'] ?? '?'}: ${(m.headers['onto-error'] ?? '').slice(0, 120)})`,
      );
  const deadKeys = new Set(dead.map((m) => m.key));
  for (const key of poison) if (!deadKeys.has(key)) dlqBad.push(`poison ${key} not dead-lettered`);
  const [setAside] = await q('data', 'SELECT count(*)::int AS n FROM outbox_set_aside');
  if (setAside.n > 0) dlqBad.push(`${setAside.n} events of data set aside`);
  row('DLQs hold only the poison sent on purpose', dead.length, dlqBad);

  // 8. the clients without Kafka: every acknowledged write reached the SSE subscriber and the
  // webhook receiver, per object in order (the subscriber once each, across reconnections).
  const acknowledged = new Map<string, number[]>();
  for (const [pk, writes] of ledger) {
    for (const w of writes) {
      if (w.outcome === 'ok' && w.version !== undefined && ['put', 'put-if-match', 'patch', 'delete'].includes(w.op))
        listOf(acknowledged, pk).push(w.version);
    }
  }
  const liveChecked = [...acknowledged.values()].reduce((n, v) => n + v.length, 0);
  await waitFor(
    'the SSE subscriber and the webhook receiver to get every acknowledged write',
    async () =>
      liveViolations(sse.versions, acknowledged).missing.length === 0 &&
      liveViolations(receiver.versions, acknowledged).missing.length === 0,
    120_000,
  ).catch(() => {});
  const sseFound = liveViolations(sse.versions, acknowledged);
  const sseRepeats = [...sse.versions].flatMap(([pk, v]) =>
    v.length === new Set(v).size ? [] : [`${pk}: a version twice (${v.join(',')})`],
  );
  row(
    'SSE: every acknowledged write, per object in order, none twice (reconnecting to either data instance)',
    liveChecked,
    [
      ...sseFound.missing.map((m) => `missing ${m}`),
      ...sseFound.disorder,
      ...sseRepeats,
      ...sse.unannounced,
      ...(sse.counts.gone > 0 ? [`${sse.counts.gone} resumptions answered 410`] : []),
    ],
  );
  const hookFound = liveViolations(receiver.versions, acknowledged);
  const hookBad = [
    ...hookFound.missing.map((m) => `missing ${m}`),
    ...hookFound.disorder,
    ...(receiver.counts.badSignatures > 0 ? [`${receiver.counts.badSignatures} signatures did not verify`] : []),
  ];
  row('webhooks: every acknowledged write delivered, signed, per object in order', liveChecked, hookBad);

  const lost =
    sseFound.missing.length +
    dataBad.length +
    lostEvents +
    intelBad.filter((b) => b.includes('missing') || b.includes('in data, v')).length;
  const appliedTwice =
    actionBad.filter((b) => / \d+ actions|after one action/.test(b)).length +
    alertBad.filter((b) => /alerts raised|open alerts/.test(b)).length;
  return {
    rows,
    faults: faults.count,
    counts: {
      'writes acknowledged': acknowledgedWrites,
      'requests (acknowledged / refused / unknown)': `${stats.acknowledged} / ${stats.refused} / ${stats.unknown}`,
      'events on onto.changes.objects (distinct)': seen.size,
      'duplicates on the wire': duplicates,
      'actions (idempotency keys)': actions.length,
      'schema changes acknowledged': schemaChanges.filter((c) => c.outcome === 'ok').length,
      'poison events sent': poison.length,
      'SSE connections / resumptions answered 410 / recount announcements': `${sse.counts.connections} / ${sse.counts.gone} / ${sse.counts.announced}`,
      'webhook requests / redelivered (same webhook-id)': `${receiver.counts.requests} / ${receiver.counts.redelivered}`,
      'instance starts': Object.values(stack)
        .flat()
        .reduce((n, i) => n + i.starts, 0),
      lost,
      'applied twice': appliedTwice,
    },
  };
}

async function listTopics(kafka: PrivateKafka): Promise<string[]> {
  const admin = new Kafka({ brokers: kafka.brokers.split(','), logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    return await admin.listTopics();
  } finally {
    await admin.disconnect();
  }
}

/** Every record of a topic, from the start to the end it has now. */
async function readTopic(
  kafka: PrivateKafka,
  topic: string,
): Promise<{ key: string; value: string; headers: Record<string, string> }[]> {
  const client = new Kafka({ brokers: kafka.brokers.split(','), logLevel: logLevel.NOTHING });
  const admin = client.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const remaining = new Map(
    ends.filter((e) => Number(e.high) > Number(e.low)).map((e) => [e.partition, Number(e.high)]),
  );
  const out: { key: string; value: string; headers: Record<string, string>; partition: number }[] = [];
  if (remaining.size === 0) return out;
  const consumer = client.consumer({ groupId: `chaos-check-${Math.random().toString(36).slice(2)}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`reading ${topic} timed out`)), 120_000);
    consumer
      .run({
        eachMessage: async ({ partition, message }) => {
          const headers: Record<string, string> = {};
          for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
          out.push({ key: String(message.key), value: String(message.value), headers, partition });
          if (Number(message.offset) + 1 >= (remaining.get(partition) ?? 0)) remaining.delete(partition);
          if (remaining.size === 0) {
            clearTimeout(timer);
            resolve();
          }
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();
  return out;
}

function report(table: Table): number {
  const violations =
    table.rows.reduce((n, r) => n + r.violations, 0) +
    Number(table.counts.lost) +
    Number(table.counts['applied twice']);
  const w = Math.max(...table.rows.map((r) => r.check.length));
  const lines = [
    '',
    `${'check'.padEnd(w)}  checked  violations`,
    ...table.rows.map(
      (r) =>
        `${r.check.padEnd(w)}  ${String(r.checked).padStart(7)}  ${String(r.violations).padStart(10)}${r.detail ? `  ${r.detail}` : ''}`,
    ),
    '',
    ...Object.entries(table.counts).map(([k, v]) => `${k.padEnd(w)}  ${v}`),
    `${'faults injected'.padEnd(w)}  ${Object.entries(table.faults)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    '',
    violations === 0 ? 'chaos run: no violations' : `chaos run: ${violations} violation(s)`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  if (jsonOut) writeFileSync(jsonOut, JSON.stringify({ ...table, violations }, null, 2));
  return violations === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    say(`the run broke: ${error instanceof Error ? error.stack : error}`);
    process.exit(2);
  },
);

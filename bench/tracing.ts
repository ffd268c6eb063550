/**
 * What tracing costs data's single-object PUT (docs/adr/0056): the PUT throughput of data-put
 * (autocannon, 64 connections, every request a change) with data in each mode, alternated round by
 * round on fresh stacks:
 *   - off:     the default: the SDK is in the build, nothing starts it (no OTEL_* variables);
 *   - on:      every span recorded and exported (OTEL_TRACES_SAMPLER=always_on, OTLP over HTTP to a
 *              sink in this process), the traceparent stored with each outbox row and sent;
 *   - without: data built from BENCH_BASELINE_REPO, a checkout of the code before tracing (e.g.
 *              `git worktree add /tmp/before <commit> && cd /tmp/before && pnpm install && pnpm build`);
 *              skipped when unset.
 * Prints on ÷ off (goal ≥ 0.85) and off ÷ without (goal ≥ 0.98), medians of the rounds.
 *
 *   ./onto bench tracing [seconds] [rounds]      (default 10 s, 3 rounds)
 */
import { createServer } from 'node:http';
import autocannon from 'autocannon';
import { fmt } from './lib/harness.js';
import { benchStack, Item } from './lib/stack.js';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 3);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 64);
const warmup = Number(process.env.BENCH_WARMUP ?? 3);
const baseline = process.env.BENCH_BASELINE_REPO;
const objects = 100_000;

// The collector: takes OTLP exports and counts them, answering as a collector does.
let exports = 0;
let exportedBytes = 0;
const sink = createServer((req, res) => {
  req.on('data', (chunk: Buffer) => {
    exportedBytes += chunk.length;
  });
  req.on('end', () => {
    exports++;
    res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
  });
});
await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
const sinkUrl = `http://127.0.0.1:${(sink.address() as { port: number }).port}`;

const modes: { name: string; env: Record<string, string>; from?: string }[] = [
  { name: 'off', env: {} },
  { name: 'on', env: { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl, OTEL_TRACES_SAMPLER: 'always_on' } },
  ...(baseline ? [{ name: 'without', env: {}, from: baseline }] : []),
];

/** PUTs per second answered 2xx by data in this mode, after a warm-up. */
async function measure(mode: (typeof modes)[number]): Promise<number> {
  const stack = await benchStack({
    dataEnv: { DB_POOL_MAX: '32', ...mode.env },
    ...(mode.from ? { dataFrom: mode.from } : {}),
  });
  try {
    await stack.world('bench', { objectTypes: { Item } });
    let n = 0;
    const load = (duration: number) =>
      autocannon({
        url: stack.data.url,
        connections,
        duration,
        requests: [
          {
            method: 'PUT',
            setupRequest: (req) => {
              n++;
              const pk = `item-${Math.floor(Math.random() * objects)}`;
              return {
                ...req,
                path: `/v1/worlds/bench/objects/Item/${pk}`,
                headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.token}` },
                body: JSON.stringify({ properties: { id: pk, name: `item ${pk}`, amount: n, status: 'open' } }),
              };
            },
          },
        ],
      });
    await load(warmup);
    const run = await load(seconds);
    if (run.non2xx > 0 || run.errors > 0) throw new Error(`${mode.name}: ${run.non2xx} non-2xx, ${run.errors} errors`);
    return run['2xx'] / seconds;
  } finally {
    await stack.close();
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2
    ? (s[(s.length - 1) / 2] as number)
    : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};

const rates = new Map<string, number[]>(modes.map((m) => [m.name, []]));
try {
  for (let round = 1; round <= rounds; round++) {
    // Alternated, and rotated each round, so that a drift of the shared machine hits every mode.
    for (let i = 0; i < modes.length; i++) {
      const mode = modes[(i + round - 1) % modes.length] as (typeof modes)[number];
      const before = exports;
      const rate = await measure(mode);
      rates.get(mode.name)?.push(rate);
      console.log(
        `round ${round} ${mode.name.padEnd(7)} ${fmt(rate)} PUT/s` +
          (mode.name === 'on' ? `  (${exports - before} OTLP exports, ${fmt(exportedBytes / 1024)} KiB so far)` : ''),
      );
    }
  }
  const m = (name: string) => median(rates.get(name) ?? []);
  if (exports === 0) throw new Error('tracing on exported no span: the comparison measured nothing');
  console.log(`tracing on (100 % sampled, OTLP) ÷ off: ${fmt(m('on') / m('off'), 3)} (goal ≥ 0.85)`);
  if (baseline)
    console.log(`SDK present, exporting off ÷ without it: ${fmt(m('off') / m('without'), 3)} (goal ≥ 0.98)`);
  else console.log('SDK present, exporting off ÷ without it: set BENCH_BASELINE_REPO to measure (see the header)');
} finally {
  sink.close();
}

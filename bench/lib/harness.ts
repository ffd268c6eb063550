import { spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { testBroker, testEndpoints } from '@onto/shared/testing';

export const repo = fileURLToPath(new URL('../..', import.meta.url));

/** Runs one of Kafka's own tools through ./onto and returns what it printed. */
export function kafkaTool(className: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(`${repo}/onto`, ['kafka-tool', className, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${className} exited ${code}: ${out}`))));
  });
}

/**
 * A postgres:// URL as psql's and pgbench's arguments: host, port and user, then the database,
 * positional (pgbench's -d is --debug), so they go last.
 */
export function libpqArgs(url: URL): string[] {
  return ['-h', url.hostname, '-p', url.port || '5432', '-U', url.username || 'postgres', url.pathname.slice(1)];
}

export async function until(what: string, probe: () => Promise<boolean>, timeoutMs = 600_000, everyMs = 100) {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * Open loop: call i of `count` is sent at start + i / rate (per second), whatever the earlier
 * ones do, so that a slow answer shows as latency rather than as a lower rate. Answers the calls'
 * promises, all sent.
 */
export async function paced<T>(rate: number, count: number, send: (i: number) => Promise<T>): Promise<Promise<T>[]> {
  const sent: Promise<T>[] = [];
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    sent.push(send(i));
  }
  return sent;
}

export const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

/**
 * Hands a benchmark's figures to `./onto bench ci` (bench/ci.ts), which runs it as a child with
 * BENCH_RESULT_FILE set; a run by hand only prints its table.
 */
export function report(bench: string, figures: Record<string, number>): void {
  const file = process.env.BENCH_RESULT_FILE;
  if (file) appendFileSync(file, `${JSON.stringify({ bench, figures })}\n`);
}

/**
 * Kafka's own EndToEndLatency tool (5,000 records, acks=all, `recordBytes` each) on a topic of one
 * partition under `prefix` on the test broker: its p50 and p99 in ms, the reference latency
 * benchmarks set their own beside.
 */
export async function kafkaEndToEnd(prefix: string, recordBytes: number): Promise<{ p50: number; p99: number }> {
  const { kafkaBrokers } = testEndpoints();
  const admin = await testBroker(kafkaBrokers).admin();
  const topic = `${prefix}bench.e2e`;
  await admin.ensureTopics([{ name: topic, partitions: 1 }]);
  await admin.disconnect();
  const out = await kafkaTool('org.apache.kafka.tools.EndToEndLatency', [
    kafkaBrokers,
    topic,
    '5000',
    'all',
    String(recordBytes),
  ]);
  const m = out.match(/Percentiles: 50th = (\d+), 99th = (\d+)/);
  return { p50: Number(m?.[1]), p99: Number(m?.[2]) };
}

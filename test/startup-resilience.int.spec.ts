import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import {
  createTestDatabase,
  createTestTopics,
  eventually,
  type PrivateKafka,
  startPrivateKafka,
  type TestDatabase,
  testEndpoints,
  testIdentityEnv,
} from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

// Issue 33: a service started while PostgreSQL, Redis and the broker are all unreachable (the
// chaos run restarted one while PostgreSQL was down, and it exited "failed to start") stays up,
// holds its port, says why it is not ready, and boots once they answer. Real processes (dist/).
const serverJs = (name: string) => fileURLToPath(new URL(`../services/${name}/dist/server.js`, import.meta.url));

/** A TCP forwarder on a port of its own that can be opened and closed: the dependency "comes back". */
class Forwarder {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  constructor(
    readonly port: number,
    private readonly target: { host: string; port: number },
  ) {}
  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.server = server;
  }
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server = undefined;
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

interface Run {
  child: ChildProcess;
  output: () => string;
}

function start(name: string, env: Record<string, string | undefined>): Run {
  const child = spawn(process.execPath, [serverJs(name)], {
    env: { PATH: process.env.PATH, ...env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  return { child, output: () => output };
}

async function ready(port: number): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`http://127.0.0.1:${port}/ready`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe.runIf(SERVICES.every((s) => existsSync(serverJs(s.name))))('start-up while dependencies are away', () => {
  const endpoints = testEndpoints();
  const dbs = new Map<string, TestDatabase>();
  let kafka: PrivateKafka;
  let prefix: string;

  beforeAll(async () => {
    for (const s of SERVICES) dbs.set(s.name, await createTestDatabase(endpoints.postgresUrl, s.migrations));
    kafka = await startPrivateKafka();
    ({ prefix } = await createTestTopics(kafka.brokers, 2));
  }, 180_000);
  afterAll(async () => {
    await kafka?.close();
    for (const db of dbs.values()) await db.drop();
  });

  it('each service stays up and unready while PostgreSQL, Redis and Kafka are down, then becomes ready on its own', async () => {
    const pgUrl = new URL(endpoints.postgresUrl);
    const redisUrl = new URL(endpoints.redisUrl);
    const pg = new Forwarder(await freePort(), { host: pgUrl.hostname, port: Number(pgUrl.port || 5432) });
    const redis = new Forwarder(await freePort(), { host: redisUrl.hostname, port: Number(redisUrl.port || 6379) });
    await kafka.stop();
    const runs: { name: string; port: number; run: Run }[] = [];
    try {
      for (const s of SERVICES) {
        const db = new URL(dbs.get(s.name)?.url ?? '');
        db.host = `127.0.0.1:${pg.port}`;
        const port = await freePort();
        const run = start(s.name, {
          PORT: String(port),
          HOST: '127.0.0.1',
          LOG_LEVEL: 'info',
          DATABASE_URL: db.toString(),
          REDIS_URL: `redis://127.0.0.1:${redis.port}`,
          KAFKA_BROKERS: kafka.brokers,
          ONTO_TOPIC_PREFIX: prefix,
          ...testIdentityEnv(),
        });
        runs.push({ name: s.name, port, run });
      }
      // Down: alive, unready with the reason, other routes 503 problem+json; and still there later.
      for (const { name, port, run } of runs) {
        await eventually(
          () => `${name} to hold its port: ${run.output().slice(-1500)}`,
          async () => {
            expect(run.child.exitCode, run.output()).toBeNull();
            return (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.status === 200;
          },
          { timeoutMs: 30_000, intervalMs: 100 },
        );
        const { status, body } = await ready(port);
        expect(status).toBe(503);
        expect(body).toMatchObject({ status: 'unavailable', checks: { startup: { status: 'down' } } });
        expect(JSON.stringify(body)).toContain('ECONNREFUSED');
        const other = await fetch(`http://127.0.0.1:${port}/docs/json`);
        expect(other.status).toBe(503);
        expect(other.headers.get('content-type')).toContain('application/problem+json');
        expect(other.headers.get('retry-after')).toBe('1');
        expect(await other.json()).toMatchObject({ status: 503, type: 'https://onto.dev/problems/unavailable' });
      }
      await new Promise((r) => setTimeout(r, 3000));
      for (const { name, run } of runs) {
        expect(run.child.exitCode, `${name}: ${run.output()}`).toBeNull();
        expect(run.output()).toContain('a dependency is unreachable at start-up');
        expect(run.output()).not.toContain('failed to start');
      }

      // PostgreSQL back: each boots by itself (backoff at most 5 s), degraded while Redis and Kafka are away.
      await pg.open();
      for (const { name, port, run } of runs) {
        await eventually(
          () => `${name} to boot once PostgreSQL answers: ${run.output().slice(-1500)}`,
          async () => (await ready(port).catch(() => undefined))?.status === 200,
          { timeoutMs: 60_000, intervalMs: 200 },
        );
        const { body } = await ready(port);
        expect(body).toMatchObject({
          status: 'degraded',
          checks: { postgres: { status: 'up' }, redis: { status: 'down' }, kafka: { status: 'down' } },
        });
      }

      // Redis and Kafka back: ready, with no restart of the process.
      await redis.open();
      await kafka.start();
      for (const { name, port, run } of runs) {
        let last: unknown;
        await eventually(
          () =>
            `${name} to be ready: ${JSON.stringify(last)}\n${run
              .output()
              .split('\n')
              .filter((l) => /"level":(40|50|60)/.test(l))
              .slice(-12)
              .join('\n')}`,
          async () => {
            last = (await ready(port).catch((error: Error) => ({ body: error.message })))?.body;
            return (last as { status?: string }).status === 'ready';
          },
          { timeoutMs: 60_000, intervalMs: 250 },
        );
        expect(run.child.exitCode).toBeNull();
        run.child.kill('SIGTERM');
        const [code] = await once(run.child, 'exit');
        expect(code, run.output()).toBe(0);
      }
    } finally {
      for (const { run } of runs) run.child.kill('SIGKILL');
      await pg.close();
      await redis.close();
    }
  }, 240_000);

  it('a failure that is not a dependency being away still exits 1', async () => {
    const db = new URL(dbs.get('data')?.url ?? '');
    db.pathname = '/onto_no_such_database_33';
    const run = start('data', {
      PORT: String(await freePort()),
      HOST: '127.0.0.1',
      DATABASE_URL: db.toString(),
      REDIS_URL: endpoints.redisUrl,
      KAFKA_BROKERS: kafka.brokers,
      ...testIdentityEnv(),
    });
    const [code] = await once(run.child, 'exit');
    expect(code).toBe(1);
    expect(run.output()).toContain('failed to start');
    expect(run.output()).toContain('onto_no_such_database_33');
  }, 60_000);
});

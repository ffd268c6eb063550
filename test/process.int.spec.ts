import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import {
  builtForProcesses,
  createTestDatabase,
  eventually,
  testEndpoints,
  testIdentityEnv,
} from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

// These tests run the compiled servers as real processes (./onto test builds them first).
const serverJs = (name: string) => fileURLToPath(new URL(`../services/${name}/dist/server.js`, import.meta.url));

interface Run {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function start(name: string, env: Record<string, string | undefined>): Run {
  const child = spawn(process.execPath, [serverJs(name)], {
    env: { PATH: process.env.PATH, ...env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  return { child, output: () => output, exited };
}

async function waitForListening(run: Run, timeoutMs = 20_000): Promise<void> {
  await eventually(
    () => `the server to listen: ${run.output()}`,
    () => {
      if (run.child.exitCode !== null) throw new Error(`server exited: ${run.output()}`);
      return run.output().includes('Server listening');
    },
    { timeoutMs, intervalMs: 50 },
  );
}

let nextPort = 14_100 + Math.floor(Math.random() * 500);

describe.runIf(builtForProcesses(SERVICES.map((s) => serverJs(s.name))))('service processes', () => {
  const endpoints = testEndpoints();
  const dbs = new Map<string, Awaited<ReturnType<typeof createTestDatabase>>>();
  const baseEnv = (name: string) => ({
    DATABASE_URL: dbs.get(name)?.url,
    REDIS_URL: endpoints.redisUrl,
    KAFKA_BROKERS: endpoints.kafkaBrokers,
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    ...testIdentityEnv(),
  });

  beforeAll(async () => {
    for (const s of SERVICES) dbs.set(s.name, await createTestDatabase(endpoints.postgresUrl, s.migrations));
  });
  afterAll(async () => {
    for (const db of dbs.values()) await db.drop();
  });

  it.each(SERVICES)('$name exits non-zero naming a missing variable', async ({ name }) => {
    const { DATABASE_URL: _, ...env } = baseEnv(name);
    const run = start(name, { ...env, PORT: String(nextPort++) });
    expect(await run.exited).toBe(1);
    expect(run.output()).toContain('DATABASE_URL');
  });

  it.each(SERVICES)('$name exits non-zero naming malformed variables', async ({ name }) => {
    const run = start(name, { ...baseEnv(name), PORT: 'eighty', KAFKA_BROKERS: 'no port here' });
    expect(await run.exited).toBe(1);
    expect(run.output()).toMatch(/PORT: .*"eighty"/);
    expect(run.output()).toContain('KAFKA_BROKERS');
  });

  // A broker that accepts connections and never answers is the hard case for a shutdown: every
  // Kafka call waits for its own timeout. Each service still ends within SHUTDOWN_TIMEOUT_MS.
  it.each(SERVICES)(
    '$name boots, answers /ready, and on SIGTERM lets an in-flight request finish before exiting 0',
    async ({ name }) => {
      // A broker that accepts connections and never answers keeps /ready waiting on its Kafka
      // check for its full timeout: that request is in flight when SIGTERM arrives.
      const sockets: Socket[] = [];
      const silent: Server = createServer((s) => sockets.push(s));
      await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
      const silentPort = (silent.address() as { port: number }).port;
      const port = nextPort++;
      const run = start(name, {
        ...baseEnv(name),
        PORT: String(port),
        KAFKA_BROKERS: `127.0.0.1:${silentPort}`,
      });
      try {
        await waitForListening(run);
        const started = Date.now();
        const inFlight = fetch(`http://127.0.0.1:${port}/ready`);
        await eventually('the request received', () => run.output().includes('"url":"/ready"'));
        run.child.kill('SIGTERM');
        const res = await inFlight;
        expect(res.status).toBe(200); // Kafka down is degraded, not unready (ADR 22)
        expect(await res.json()).toMatchObject({ status: 'degraded', checks: { kafka: { status: 'down' } } });
        expect(Date.now() - started).toBeGreaterThan(1000);
        expect(await run.exited, run.output()).toBe(0);
        expect(run.output()).toContain('shutting down');
        await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
      } finally {
        run.child.kill('SIGKILL');
        for (const s of sockets) s.destroy();
        silent.close();
      }
    },
  );

  it.each(SERVICES)('$name boots as a process and is ready', async ({ name }) => {
    const port = nextPort++;
    const run = start(name, { ...baseEnv(name), PORT: String(port) });
    try {
      await waitForListening(run);
      const res = await fetch(`http://127.0.0.1:${port}/ready`);
      expect(res.status).toBe(200);
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
  });
});

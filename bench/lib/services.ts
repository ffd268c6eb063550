import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { testIdentityEnv } from '@onto/shared/testing';
import { repo } from './harness.js';

export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/**
 * A service from its compiled server, as deployed: its own process, its own event loop. It gets this
 * process's identity and key-encryption keys (required, ADR 35 and 42) unless `env` names others.
 * `from`: the checkout whose build runs (another commit's, for a before/after).
 */
export async function startService(
  name: 'control' | 'data' | 'intelligence',
  env: Record<string, string>,
  from = repo,
) {
  const port = await freePort();
  // BENCH_NODE_ARGS, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof", to look inside a service.
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child: ChildProcess = spawn(process.execPath, [...nodeArgs, `${from}/services/${name}/dist/server.js`], {
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn', ...testIdentityEnv(), ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ready = await fetch(`${url}/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${name} did not become ready`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    /** SIGKILL: the process dies wherever it is, as in a crash. */
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/**
 * The floor under every service on this machine: a trivial Node HTTP server (it answers a small
 * JSON body) and a keep-alive client sending it open-loop PUTs at each of several rates. It
 * prints the CPU per request on each side. Nothing of onto runs here.
 *
 * On the 2-core VMs the benchmarks run on, sparse work costs far more per request than dense
 * work: the code and caches are cold each time a process wakes. The intelligence-e2e figures at
 * low rates must be read against this (ADR 19).
 *
 *   ./onto bench node-floor [seconds] [rates]      (default 10 s at 50,300,1000 requests/s)
 */
import { fork } from 'node:child_process';
import * as http from 'node:http';
import { fileURLToPath } from 'node:url';
import { paced } from './lib/harness.js';

if (process.argv[2] === 'server') {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end('{"ok":true}');
    });
  });
  server.listen(0, '127.0.0.1', () => process.send?.((server.address() as { port: number }).port));
  process.on('message', () => process.send?.(process.cpuUsage()));
} else {
  const seconds = Number(process.argv[2] ?? 10);
  const rates = (process.argv[3] ?? '50,300,1000').split(',').map(Number);
  const ms = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

  const server = fork(fileURLToPath(import.meta.url), ['server'], { execArgv: process.execArgv });
  const port = await new Promise<number>((resolve) => server.once('message', (m) => resolve(m as number)));
  const serverCpu = () =>
    new Promise<NodeJS.CpuUsage>((resolve) => {
      server.once('message', (m) => resolve(m as NodeJS.CpuUsage));
      server.send('cpu');
    });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 128 });
  const put = () =>
    new Promise<void>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'PUT', path: '/x', agent }, (res) => {
        res.resume();
        res.on('end', resolve);
      });
      req.on('error', reject);
      req.end('{"properties":{"id":"x","amount":1}}');
    });
  /** PUTs at `rate` for `forSeconds`; answers the seconds it took until the last was answered. */
  const run = async (rate: number, forSeconds: number) => {
    const start = performance.now();
    await Promise.all(await paced(rate, forSeconds * rate, put));
    return (performance.now() - start) / 1000;
  };

  console.log('| requests/s | client CPU ms per request | server CPU ms per request | client + server, cores busy |');
  console.log('|---:|---:|---:|---:|');
  for (const rate of rates) {
    await run(rate, Math.min(3, seconds)); // warm-up at the same rate, not counted
    const client0 = process.cpuUsage();
    const server0 = await serverCpu();
    const wall = await run(rate, seconds);
    const client = ms(process.cpuUsage(client0));
    const serverUsed = ms(await serverCpu()) - ms(server0);
    const requests = seconds * rate;
    console.log(
      `| ${rate} | ${(client / requests).toFixed(3)} | ${(serverUsed / requests).toFixed(3)} | ${((client + serverUsed) / 1000 / wall).toFixed(2)} |`,
    );
  }
  agent.destroy();
  server.kill();
}

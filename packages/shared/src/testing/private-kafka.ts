import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createKafkaBroker } from '../kafka/kafkajs-broker.js';
import { testLogger } from './kafka.js';

/** The repository's infra/kafka (server.properties, log4j2.properties), from src/testing or dist/testing. */
const INFRA = fileURLToPath(new URL('../../../../infra/kafka/', import.meta.url));

/**
 * The Kafka jars ./onto fetched (fetch_kafka_jars): ONTO_KAFKA_LIBS, else the newest complete
 * `kafka-<version>/libs` under ~/.cache/onto.
 */
function kafkaLibs(): string {
  const given = process.env.ONTO_KAFKA_LIBS;
  if (given) return given;
  const cache = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'onto');
  const found = (existsSync(cache) ? readdirSync(cache) : [])
    .filter((d) => d.startsWith('kafka-') && existsSync(join(cache, d, 'libs', '.onto-complete')))
    .sort()
    .at(-1);
  if (!found)
    throw new Error(`no Kafka jars under ${cache}: run ./onto up once (it fetches them), or set ONTO_KAFKA_LIBS`);
  return join(cache, found, 'libs');
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface PrivateKafka {
  /** The bootstrap address, for KAFKA_BROKERS. */
  brokers: string;
  /** Kills the broker (SIGKILL): clients see connections refused until `start`. */
  stop(): Promise<void>;
  /** Starts the broker again on the same ports and log dir; resolves once it answers metadata. */
  start(): Promise<void>;
  /** Freezes the broker (SIGSTOP): connections stay open and nothing answers, as in a partition. */
  pause(): void;
  resume(): void;
  /** Kills the broker and removes its log dir. */
  close(): Promise<void>;
}

/**
 * A single-node KRaft broker of a test's own, on free ports with its own log dir and a small heap,
 * so that a test can stop, restart or freeze Kafka without touching the shared broker (a proxy
 * in front of the shared one would not do: the broker advertises its own address in metadata).
 */
export async function startPrivateKafka(options: { readyTimeoutMs?: number } = {}): Promise<PrivateKafka> {
  const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
  const libs = kafkaLibs();
  const dir = await mkdtemp(join(tmpdir(), 'onto-private-kafka-'));
  const [port, controllerPort] = [await freePort(), await freePort()];
  const properties = join(dir, 'server.properties');
  const template = await readFile(join(INFRA, 'server.properties'), 'utf8');
  await writeFile(
    properties,
    template
      .replaceAll('@KAFKA_PORT@', String(port))
      .replaceAll('@CONTROLLER_PORT@', String(controllerPort))
      .replaceAll('@LOG_DIRS@', join(dir, 'data')),
  );
  const jvm = (heap: string, ...args: string[]) => [
    `-Xms${heap}`,
    `-Xmx${heap}`,
    '-XX:+UseSerialGC',
    '-XX:TieredStopAtLevel=1', // a test broker lives a minute: quick start over peak speed
    '-Djava.awt.headless=true',
    `-Dlog4j2.configurationFile=${join(INFRA, 'log4j2.properties')}`,
    `-Dkafka.logs.dir=${join(dir, 'log')}`,
    '-cp',
    `${libs}/*`,
    ...args,
  ];
  // A KRaft cluster id is 16 random bytes in URL-safe base64 (what StorageTool random-uuid prints).
  const clusterId = randomBytes(16).toString('base64url');
  await run('java', jvm('64m', 'kafka.tools.StorageTool', 'format', '-t', clusterId, '-c', properties));

  const brokers = `127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const start = async () => {
    if (child) return;
    const started = spawn('java', jvm('256m', 'kafka.Kafka', properties), { stdio: 'ignore' });
    child = started;
    started.once('exit', () => {
      if (child === started) child = undefined;
    });
    const admin = createKafkaBroker({
      brokers: [brokers],
      clientId: 'private-kafka-probe',
      logger: testLogger,
      retries: 0,
      connectionTimeoutMs: 1000,
      requestTimeoutMs: 2000,
    });
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      if (!child) throw new Error(`the private Kafka broker exited; see ${join(dir, 'log', 'kafka.log')}`);
      try {
        const a = await admin.admin();
        try {
          await a.ping();
          return;
        } finally {
          await a.disconnect().catch(() => {});
        }
      } catch (error) {
        if (Date.now() > deadline) {
          const log = readFileSafe(join(dir, 'log', 'kafka.log')).slice(-2000);
          throw new Error(`the private Kafka broker did not answer within ${readyTimeoutMs} ms: ${error}\n${log}`);
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  };
  const stop = async () => {
    const running = child;
    if (!running) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill('SIGCONT');
    running.kill('SIGKILL');
    await exited;
  };
  await start();
  return {
    brokers,
    start,
    stop,
    pause: () => child?.kill('SIGSTOP'),
    resume: () => child?.kill('SIGCONT'),
    async close() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function readFileSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (d) => {
      stderr += String(d);
    });
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} ${args.at(-4)} exited ${code}: ${stderr.slice(-2000)}`)),
    );
  });
}

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  consumersPlugin,
  encodeEvent,
  fastifyOptions,
  healthPlugin,
  type InboxConsumer,
  jobsPlugin,
  kafkaPlugin,
  kernelMigrations,
  metricsPlugin,
  newEvent,
  physicalTopic,
  postgresPlugin,
  redisPlugin,
} from '@onto/shared';
import {
  createTestDatabase,
  createTestTopics,
  type TestDatabase,
  testBroker,
  testEndpoints,
} from '@onto/shared/testing';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { dashboardExpressions, type RuleFile, rulesDir } from './monitoring.js';

/**
 * The lag alert end to end: a service's consumer stops, records pile up on its topic, and a real
 * Prometheus (Debian's, which ./onto test installs) scrapes /metrics and fires the alert.
 *
 * The rules are the repository's with one change: their `for:` holds are cut to 2 s, as no test
 * waits five minutes. How long each condition must hold is proved by promtool's rule tests
 * (infra/prometheus/tests), which run the unchanged rules on simulated time; this test proves
 * what those cannot: the metric's real name and labels, the scrape, the expression over them.
 */
const HOLD = '2s';
const LOGICAL_TOPIC = 'onto.changes.objects';

interface PromAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing';
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function waitUntil<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 45_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const found = await probe();
      if (found !== undefined) return found;
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

describe('a stopped consumer fires the lag alert in Prometheus', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'onto-prometheus-'));
  let topics: Awaited<ReturnType<typeof createTestTopics>>;
  let db: TestDatabase;
  let app: FastifyInstance;
  let consumer: InboxConsumer;
  let prometheus: ChildProcess;
  let prometheusUrl: string;
  let prometheusLog = '';
  const applied: string[] = [];

  beforeAll(async () => {
    const endpoints = testEndpoints();
    topics = await createTestTopics(endpoints.kafkaBrokers);
    db = await createTestDatabase(endpoints.postgresUrl, [kernelMigrations]);

    // The shared plumbing every service registers (platformPlugin), with one consumer of our own.
    app = Fastify(fastifyOptions({ LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent' }));
    await app.register(metricsPlugin, { service: 'lag-probe' });
    await app.register(healthPlugin, {});
    await app.register(postgresPlugin, {
      connectionString: db.url,
      poolMax: 4,
      applicationName: 'onto-lag-probe',
      migrations: [kernelMigrations],
    });
    await app.register(redisPlugin, { url: endpoints.redisUrl });
    await app.register(kafkaPlugin, {
      brokers: endpoints.kafkaBrokers.split(','),
      clientId: 'onto-lag-probe',
      topicPrefix: topics.prefix,
    });
    await app.register(jobsPlugin, {}); // the consumers' inbox pruning runs on it
    await app.register(consumersPlugin, {});
    app.after(() => {
      consumer = app.addConsumer({
        name: 'lag-probe',
        topics: [LOGICAL_TOPIC],
        apply: async (_tx, events) => {
          applied.push(...events.map((e) => e.event.event_id));
        },
      });
    });
    const address = await app.listen({ host: '127.0.0.1', port: 0 });

    const rules = parse(readFileSync(join(rulesDir, 'onto.yml'), 'utf8')) as RuleFile;
    for (const rule of rules.groups.flatMap((g) => g.rules)) if (rule.for) rule.for = HOLD;
    writeFileSync(join(scratch, 'rules.yml'), stringify(rules));
    writeFileSync(
      join(scratch, 'prometheus.yml'),
      stringify({
        global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
        rule_files: [join(scratch, 'rules.yml')],
        scrape_configs: [
          {
            job_name: 'onto',
            honor_labels: true,
            static_configs: [{ targets: [new URL(address).host], labels: { service: 'lag-probe' } }],
          },
        ],
      }),
    );
    const port = await freePort();
    prometheusUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(
      'prometheus',
      [
        `--config.file=${join(scratch, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(scratch, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    prometheus.stderr?.on('data', (chunk: Buffer) => {
      prometheusLog = (prometheusLog + chunk.toString()).slice(-4000);
    });
    const started = new Promise<never>((_, reject) => {
      prometheus.once('error', (e) =>
        reject(new Error(`prometheus did not start (./onto test installs it): ${e.message}`)),
      );
      prometheus.once('exit', (code) => reject(new Error(`prometheus exited (${code}):\n${prometheusLog}`)));
    });
    await Promise.race([
      started,
      waitUntil('prometheus to be ready', async () =>
        (await fetch(`${prometheusUrl}/-/ready`)).ok ? true : undefined,
      ),
    ]);
  });

  afterAll(async () => {
    if (prometheus && prometheus.exitCode === null) {
      const exited = new Promise((resolve) => prometheus.once('exit', resolve));
      prometheus.kill('SIGTERM');
      await exited;
    }
    await app?.close();
    await db?.drop();
    await topics?.drop();
    rmSync(scratch, { recursive: true, force: true });
  });

  const publish = async (count: number, from: number) => {
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    const topic = physicalTopic(topics.prefix, LOGICAL_TOPIC);
    try {
      for (let start = 0; start < count; start += 1000) {
        const size = Math.min(1000, count - start);
        await producer.send([
          {
            topic,
            messages: Array.from({ length: size }, (_, i) => ({ key: `k${from + start + i}`, value: '{}' })),
          },
        ]);
      }
    } finally {
      await producer.disconnect();
    }
  };

  const alerts = async () => {
    const body = (await (await fetch(`${prometheusUrl}/api/v1/alerts`)).json()) as {
      status: string;
      data: { alerts: PromAlert[] };
    };
    expect(body.status).toBe('success');
    return body.data.alerts.filter((a) => a.labels.consumer === `${topics.prefix}lag-probe`);
  };

  const firing = (name: string) => async () =>
    (await alerts()).find((a) => a.labels.alertname === name && a.state === 'firing');

  const scrapedLag = async () => {
    const query = encodeURIComponent(`sum(onto_consumer_lag{consumer="${topics.prefix}lag-probe"})`);
    const body = (await (await fetch(`${prometheusUrl}/api/v1/query?query=${query}`)).json()) as {
      data: { result: { value: [number, string] }[] };
    };
    return body.data.result[0] ? Number(body.data.result[0].value[1]) : undefined;
  };

  it('is quiet while the consumer keeps up', async () => {
    const event = newEvent({
      type: 'object.updated',
      worldId: 'w1',
      key: 'order/a',
      version: 1,
      producer: 'data',
      producerSeq: 1,
      payload: {
        type: 'order',
        pk: 'a',
        version: 1,
        before: null,
        after: { amount: 1 },
        actor: 'lag-probe',
        requestId: 'lag-probe',
        schemaVersion: 1,
      },
      causedBy: null,
    });
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    await producer.send([
      { topic: physicalTopic(topics.prefix, LOGICAL_TOPIC), messages: [{ key: 'w1', value: encodeEvent(event) }] },
    ]);
    await producer.disconnect();
    await waitUntil('the consumer to apply the event', async () =>
      applied.includes(event.event_id) ? true : undefined,
    );
    await waitUntil('Prometheus to scrape the lag', async () => ((await scrapedLag()) === 0 ? true : undefined));
    expect(await alerts()).toEqual([]);
  }, 120_000);

  it('fires the dead-letter alert once a record is dead-lettered', async () => {
    const dlq = `${physicalTopic(topics.prefix, LOGICAL_TOPIC)}.dlq`;
    const dlqAlert = async () => {
      const body = (await (await fetch(`${prometheusUrl}/api/v1/alerts`)).json()) as { data: { alerts: PromAlert[] } };
      return body.data.alerts.find(
        (a) => a.labels.alertname === 'OntoDeadLetterTopicNotEmpty' && a.labels.topic === dlq && a.state === 'firing',
      );
    };
    expect(await dlqAlert()).toBeUndefined();
    await publish(1, -1); // not an event envelope: the consumer dead-letters it
    const alert = await waitUntil('OntoDeadLetterTopicNotEmpty to fire', dlqAlert);
    expect(alert.annotations.summary).toBe(`Dead-lettered records waiting in ${dlq}: 1`);
  }, 120_000);

  it('fires the warning past 1,000 records behind, then the critical past 10,000', async () => {
    // everything so far consumed and committed, so that the lag is exactly what follows
    await waitUntil('the lag to be 0', async () => ((await scrapedLag()) === 0 ? true : undefined));
    await consumer.stop();
    await publish(1100, 0);
    const warning = await waitUntil('OntoConsumerLagWarning to fire', firing('OntoConsumerLagWarning'));
    expect(warning.labels).toMatchObject({ severity: 'warning', service: 'lag-probe' });
    expect(warning.annotations.summary).toBe(`${topics.prefix}lag-probe (lag-probe) is 1100 records behind`);
    expect((await alerts()).map((a) => a.labels.alertname)).not.toContain('OntoConsumerLagCritical');

    await publish(9000, 1100);
    const critical = await waitUntil('OntoConsumerLagCritical to fire', firing('OntoConsumerLagCritical'));
    expect(critical.labels).toMatchObject({ severity: 'critical', service: 'lag-probe' });
    expect(critical.annotations.summary).toContain('is 10100 records behind');
    expect(applied).toHaveLength(1); // nothing consumed while stopped
  }, 120_000);

  it('evaluates every dashboard query', async () => {
    for (const { panel, expr } of dashboardExpressions()) {
      const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
      expect(response.status, `${panel}: ${expr}`).toBe(200);
    }
  });
});

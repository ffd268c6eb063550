/**
 * Schema change committed in control → `schema.updated` readable by a consumer, over N changes
 * made one after another (p50, p99), beside Kafka's own EndToEndLatency tool (acks=all, same
 * record size) on the same broker, in the same run. Goal: p99 < 50 ms.
 *
 *   ./onto bench schema-latency [changes]      (default 1000)
 */
import * as control from '@onto/control/app';
import { ConfigSchema } from '@onto/control/config';
import { type IncomingMessage, parseEvent } from '@onto/shared';
import { buildTestService, createTestTopics, testBroker, testEndpoints } from '@onto/shared/testing';
import { fmt, kafkaTool, percentile } from './lib/harness.js';

const changes = Number(process.argv[2] ?? 1000);
const BOOTSTRAP = 'bench-bootstrap-token-0123456789abcdef';
const { kafkaBrokers } = testEndpoints();
const topics = await createTestTopics(kafkaBrokers, 6);
const built = await buildTestService(
  { schema: ConfigSchema, app: control.default, migrations: control.migrations } as never,
  {
    ONTO_TOPIC_PREFIX: topics.prefix,
    ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
    // No provisioners run here: keep the world PROVISIONING (writable) for the whole run.
    WORLD_PROVISION_TIMEOUT_MS: '3600000',
  },
);
const app = built.app;

try {
  const token = (await app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken: BOOTSTRAP } })).json()
    .accessToken;
  const auth = { authorization: `Bearer ${token}` };
  await app.inject({ method: 'POST', url: '/v1/worlds', headers: auth, payload: { id: 'bench' } });

  const committedAt = new Map<number, number>();
  const latencies: number[] = [];
  let bodyBytes = 0;
  const consumer = await testBroker(kafkaBrokers).consumer({
    groupId: `${topics.prefix}latency`,
    topics: [`${topics.prefix}onto.schema`],
    fromBeginning: true,
  });
  let waiting: ((m: IncomingMessage) => void) | undefined;
  await consumer.run(async (batch) => {
    const now = performance.now();
    for (const m of batch.messages) {
      const event = parseEvent(m.value);
      const at = committedAt.get(event.version);
      if (at !== undefined) latencies.push(now - at);
      bodyBytes = m.value?.length ?? 0;
      waiting?.(m);
    }
  });

  for (let i = 1; i <= changes; i++) {
    const arrived = new Promise<IncomingMessage>((resolve) => {
      waiting = resolve;
    });
    const res = await app.inject({
      method: 'PUT',
      url: '/v1/worlds/bench/object-types/Order',
      headers: auth,
      payload: {
        displayName: 'Order',
        description: `revision ${i}`,
        primaryKey: 'id',
        properties: { id: { type: 'string', required: true }, amount: { type: 'integer', indexed: true } },
      },
    });
    if (res.statusCode !== 200) throw new Error(`change ${i}: ${res.statusCode} ${res.body}`);
    committedAt.set(res.json().version, performance.now());
    await arrived;
  }
  await consumer.disconnect();

  // Kafka's own end-to-end latency on the same broker: produce one, consume it, repeat.
  const admin = await testBroker(kafkaBrokers).admin();
  const e2eTopic = `${topics.prefix}bench.e2e`;
  await admin.ensureTopics([{ name: e2eTopic, partitions: 1 }]);
  await admin.disconnect();
  const e2e = await kafkaTool('org.apache.kafka.tools.EndToEndLatency', [
    kafkaBrokers,
    e2eTopic,
    String(changes),
    'all',
    String(bodyBytes),
  ]);
  const kafkaAvg = Number(e2e.match(/Avg latency: ([\d.]+) ms/)?.[1]);
  const kafkaP = (p: string) =>
    Number(e2e.match(/Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)/)?.[p === '50' ? 1 : 2]);

  latencies.sort((a, b) => a - b);
  const mean = latencies.reduce((a, b) => a + b, 0) / latencies.length;
  console.log('');
  console.log(`| ${fmt(changes)} changes, one at a time (${bodyBytes} B events) | p50 ms | p99 ms | mean ms |`);
  console.log('|---|---:|---:|---:|');
  console.log(
    `| schema change committed → schema.updated consumed | ${percentile(latencies, 50).toFixed(1)} | ${percentile(latencies, 99).toFixed(1)} | ${mean.toFixed(1)} |`,
  );
  console.log(`| Kafka EndToEndLatency (acks=all) | ${kafkaP('50')} | ${kafkaP('99')} | ${kafkaAvg.toFixed(1)} |`);
  console.log(`goal: p99 < 50 ms → ${percentile(latencies, 99) < 50 ? 'met' : 'NOT met'}`);
} finally {
  await built.close();
  await topics.drop();
}

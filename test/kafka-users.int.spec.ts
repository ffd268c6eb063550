import { createKafkaBroker, DLQ_HEADERS, dlqOf, platformTopics, serviceAcls } from '@onto/shared';
import {
  buildTestService,
  eventually,
  type PrivateKafka,
  startPrivateKafka,
  type TestService,
  testLogger,
} from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../packages/admin/src/errors.js';
import { runCliIn } from '../packages/admin/test/cli.js';
import { SERVICES } from './services.js';

// The three services as ./onto up runs them against an authenticated broker (docs/adr/0024): each
// logs in as its own user and is allowed only what the catalogue grants it. A broker of this
// file's own: the shared test broker stays anonymous.
describe('services with their own Kafka users', () => {
  let kafka: PrivateKafka;
  const prefix = 'users.';
  const services: TestService<unknown>[] = [];

  beforeAll(async () => {
    kafka = await startPrivateKafka({ users: ['control', 'data', 'intelligence'] });
    const admin = await createKafkaBroker({
      brokers: [kafka.brokers],
      clientId: 'users-test-admin',
      logger: testLogger,
      sasl: { mechanism: 'scram-sha-512', username: 'admin', password: kafka.passwords.get('admin') as string },
    }).admin();
    await admin.ensureTopics(platformTopics(prefix, 1));
    await admin.createAcls(serviceAcls({ prefix }));
    await admin.disconnect();
  }, 240_000);

  afterAll(async () => {
    for (const service of services) await service.close();
    await kafka?.close();
  }, 60_000);

  it("data and intelligence replicate control's identity through onto.identity, each as its own user", {
    timeout: 180_000,
  }, async () => {
    for (const name of ['control', 'data', 'intelligence'] as const) {
      const service = SERVICES.find((s) => s.name === name);
      services.push(
        await buildTestService(service as never, {
          KAFKA_BROKERS: kafka.brokers,
          ONTO_TOPIC_PREFIX: prefix,
          DB_POOL_MAX: '4',
          KAFKA_SASL_MECHANISM: 'scram-sha-512',
          KAFKA_SASL_USERNAME: name,
          KAFKA_SASL_PASSWORD: kafka.passwords.get(name) as string,
        }),
      );
    }
    // control's relay publishes heartbeats on onto.identity; the replicas' inbox consumers read them.
    for (const replica of services.slice(1)) {
      await eventually(
        () => `an identity replica to hear from control: ${JSON.stringify(replica.app.identityReplica.describe())}`,
        () => replica.app.identityReplica.lagMs() !== undefined,
        { timeoutMs: 120_000, intervalMs: 200 },
      );
    }
    for (const service of services) {
      const ready = await service.app.inject({ method: 'GET', url: '/ready' });
      expect(ready.statusCode, ready.body).toBe(200);
      // Its user may read the topics' max.message.bytes, so oversized events are refused at the write.
      expect((await service.app.learnRecordLimits()).size).toBeGreaterThan(0);
    }
  });

  it("onto-admin's Kafka commands log in as the admin user of KAFKA_SASL_* (anonymous ones are refused)", {
    timeout: 120_000,
  }, async () => {
    // Topics of their own (the admin is a super user): the services above consume users.*.
    const adminPrefix = 'admin.';
    const login = {
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME: 'admin',
      KAFKA_SASL_PASSWORD: kafka.passwords.get('admin') as string,
    };
    const broker = createKafkaBroker({
      brokers: [kafka.brokers],
      clientId: 'users-test-admin-cli',
      logger: testLogger,
      sasl: { mechanism: 'scram-sha-512', username: 'admin', password: login.KAFKA_SASL_PASSWORD },
    });
    const admin = await broker.admin();
    await admin.ensureTopics(platformTopics(adminPrefix, 1));
    const topic = `${adminPrefix}onto.changes.objects`;
    const producer = await broker.producer();
    const value = JSON.stringify({ event_id: 'e-1', type: 'object.created' });
    await producer.send([{ topic, messages: [{ key: 'w/T/1', value, headers: { 'onto-event-id': 'e-1' } }] }]);
    await producer.send([
      {
        topic: dlqOf(topic),
        messages: [
          {
            key: 'w/T/1',
            value,
            headers: {
              'onto-event-id': 'e-1',
              [DLQ_HEADERS.error]: 'refused by the test',
              [DLQ_HEADERS.errorType]: 'Error',
              [DLQ_HEADERS.topic]: topic,
              [DLQ_HEADERS.partition]: '0',
              [DLQ_HEADERS.offset]: '0',
            },
          },
        ],
      },
    ]);
    await producer.disconnect();
    const globals = ['--json', '--kafka-brokers', kafka.brokers, '--topic-prefix', adminPrefix];
    const cli = (env: NodeJS.ProcessEnv, ...args: string[]) => runCliIn(env, globals, ...args);

    // Anonymous, as before: the broker closes the connection; the message says what to set.
    const anonymous = await cli({}, 'dlq', 'list', '--topic', 'onto.changes.objects');
    expect(anonymous.code).toBe(EXIT.failure);
    expect(anonymous.err).toMatch(/Closed connection \(an authenticated broker\? log in with KAFKA_SASL_MECHANISM/);
    // A partial login is a usage error naming what is missing.
    const partial = await cli({ KAFKA_SASL_USERNAME: 'admin' }, 'dlq', 'list', '--topic', 'onto.changes.objects');
    expect(partial.code).toBe(EXIT.usage);
    expect(partial.err).toMatch(/KAFKA_SASL_MECHANISM: required when any KAFKA_SASL_ variable is set/);

    const listed = await cli(login, 'dlq', 'list', '--topic', 'onto.changes.objects');
    expect(listed.code, listed.err).toBe(EXIT.ok);
    expect(listed.json()).toEqual([
      expect.objectContaining({
        offset: '0',
        key: 'w/T/1',
        error: 'refused by the test',
        original: expect.any(Object),
      }),
    ]);
    const shown = await cli(login, 'dlq', 'show', '--topic', 'onto.changes.objects', '--offset', '0');
    expect(shown.code, shown.err).toBe(EXIT.ok);
    expect(shown.json().value).toEqual(JSON.parse(value));

    const replayed = await cli(
      login,
      'event-replay',
      '--topic',
      'onto.changes.objects',
      '--from-offset',
      '0',
      '--to-offset',
      '0',
    );
    expect(replayed.code, replayed.err).toBe(EXIT.ok);
    expect(replayed.json()).toMatchObject({ topic, replayed: 1 });
    const redriven = await cli(login, 'dlq', 'redrive', '--topic', 'onto.changes.objects');
    expect(redriven.code, redriven.err).toBe(EXIT.ok);
    expect(redriven.json()).toMatchObject({ redriven: 1 });
    // The record, replayed once and redriven once; the DLQ emptied.
    expect(await admin.partitionOffsets(topic)).toEqual([{ partition: 0, low: '0', high: '3' }]);
    const [dlq] = await admin.partitionOffsets(dlqOf(topic));
    expect(dlq?.low).toBe(dlq?.high);
    expect((await cli(login, 'dlq', 'list', '--topic', 'onto.changes.objects')).json()).toEqual([]);
    await admin.disconnect();
  });
});

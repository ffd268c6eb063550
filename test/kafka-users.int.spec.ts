import { createKafkaBroker, platformTopics, serviceAcls } from '@onto/shared';
import {
  buildTestService,
  eventually,
  type PrivateKafka,
  startPrivateKafka,
  type TestService,
  testLogger,
} from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
});

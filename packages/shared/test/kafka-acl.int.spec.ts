import kafkajs, { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { producedTopics, serviceAcls } from '../src/events/acls.js';
import { PRODUCERS, type ProducerName } from '../src/events/envelope.js';
import type { Broker, IncomingMessage } from '../src/kafka/broker.js';
import { createKafkaBroker } from '../src/kafka/kafkajs-broker.js';
import { platformTopics, TOPIC_NAMES } from '../src/kafka/topics.js';
import { eventually, testLogger } from '../src/testing/index.js';
import { type PrivateKafka, startPrivateKafka } from '../src/testing/private-kafka.js';

const { AclOperationTypes, AclPermissionTypes, AclResourceTypes, ResourcePatternTypes } = kafkajs;

// A broker of this file's own, authenticated and authorised as ./onto up runs it (docs/adr/0024):
// the shared test broker stays anonymous.
describe('kafka ACLs from the topic catalogue', () => {
  let kafka: PrivateKafka;
  const as = (user: string): Broker =>
    createKafkaBroker({
      brokers: [kafka.brokers],
      clientId: `acl-test-${user}`,
      logger: testLogger,
      retries: 1, // an idempotent producer needs one; a refusal is not retried
      sasl: { mechanism: 'scram-sha-512', username: user, password: kafka.passwords.get(user) as string },
    });
  /** A plain kafkajs client whose protocol errors, which kafkajs logs before giving up, are kept. */
  const kafkajsAs = (user: string, errorTypes: string[]) =>
    new Kafka({
      brokers: [kafka.brokers],
      clientId: `acl-test-${user}`,
      logLevel: logLevel.DEBUG,
      logCreator: () => (entry) => {
        const type = (entry.log.error as { type?: unknown } | undefined)?.type;
        if (typeof type === 'string') errorTypes.push(type);
      },
      retry: { retries: 0 },
      sasl: { mechanism: 'scram-sha-512', username: user, password: kafka.passwords.get(user) as string },
    });
  /**
   * The protocol error of a refused send: our broker's RecordsRefusedError names it as `reason`;
   * a kafkajs error carries it as `type`, or wraps it when it gives up retrying.
   */
  const errorType = (error: { type?: string; reason?: string; cause?: { type?: string } }) =>
    error.reason ?? error.type ?? error.cause?.type;
  const record = (topic: string) => [{ topic, messages: [{ key: 'w', value: `from a test to ${topic}` }] }];

  beforeAll(async () => {
    kafka = await startPrivateKafka({ users: [...PRODUCERS] });
    const admin = await as('admin').admin();
    await admin.ensureTopics(platformTopics('', 1));
    await admin.createAcls(serviceAcls());
    await admin.disconnect();
    // The authorizer takes the ACLs from the metadata log after CreateAcls answers.
    const plain = kafkajsAs('admin', []).admin();
    await plain.connect();
    await eventually('the broker to authorise with every ACL', async () => {
      const { resources } = await plain.describeAcls({
        resourceType: AclResourceTypes.ANY,
        resourcePatternType: ResourcePatternTypes.ANY,
        operation: AclOperationTypes.ANY,
        permissionType: AclPermissionTypes.ANY,
      });
      return resources.flatMap((r) => r.acls).length === serviceAcls().length;
    });
    await plain.disconnect();
  }, 240_000);

  afterAll(async () => {
    await kafka?.close();
  }, 30_000);

  it("refuses control's principal on data's topic and accepts it on its own", async () => {
    const producer = await as('control').producer();
    try {
      await expect(producer.send(record('onto.schema'))).resolves.toHaveLength(1);
      const refusal = await producer.send(record('onto.changes.objects')).catch((error) => error);
      expect(errorType(refusal)).toBe('TOPIC_AUTHORIZATION_FAILED');
    } finally {
      await producer.disconnect();
    }
  });

  it.each([...PRODUCERS])('lets %s produce exactly the topics it produces events on', async (service) => {
    const producer = await as(service).producer();
    const accepted: string[] = [];
    try {
      for (const topic of TOPIC_NAMES) {
        const sent = await producer.send(record(topic)).then(
          () => true,
          (error) => {
            expect(errorType(error), topic).toBe('TOPIC_AUTHORIZATION_FAILED');
            return false;
          },
        );
        if (sent) accepted.push(topic);
      }
    } finally {
      await producer.disconnect();
    }
    expect(accepted).toEqual(producedTopics(service as ProducerName));
    expect(accepted.length).toBeGreaterThan(0);
  });

  // Joining a group is slow on a broker this young (the offsets topic is created on first use).
  it('lets data consume onto.schema with its own group', { timeout: 120_000 }, async () => {
    const producer = await as('control').producer();
    await producer.send([{ topic: 'onto.schema', messages: [{ key: 'w', value: 'for data' }] }]);
    await producer.disconnect();

    const consumer = await as('data').consumer({ groupId: 'data-schema', topics: ['onto.schema'] });
    const seen: IncomingMessage[] = [];
    await consumer.run(async ({ messages }) => {
      seen.push(...messages);
    });
    try {
      await eventually('data to read onto.schema', () => seen.some((m) => m.value?.toString() === 'for data'), {
        timeoutMs: 60_000,
      });
    } finally {
      await consumer.disconnect();
    }
  });

  it("refuses data in intelligence's consumer group", { timeout: 120_000 }, async () => {
    const errors: string[] = [];
    const other = kafkajsAs('data', errors).consumer({ groupId: 'intelligence-schema', retry: { retries: 0 } });
    try {
      await other.connect();
      await other.subscribe({ topics: ['onto.schema'], fromBeginning: true });
      await other.run({ eachMessage: async () => {} });
      await eventually(
        () => `GROUP_AUTHORIZATION_FAILED among ${JSON.stringify(errors)}`,
        () => errors.includes('GROUP_AUTHORIZATION_FAILED'),
        { timeoutMs: 60_000 },
      );
    } finally {
      await other.disconnect();
    }
  });

  it('refuses a client without credentials', async () => {
    const anonymous = new Kafka({
      brokers: [kafka.brokers],
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
      connectionTimeout: 2000,
    });
    const admin = anonymous.admin();
    await expect(admin.connect().then(() => admin.listTopics())).rejects.toThrow();
    await admin.disconnect();
  });
});

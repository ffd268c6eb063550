import { execFile } from 'node:child_process';
import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createKafkaBroker, DLQ_HEADERS, dlqOf, platformTopics, serviceAcls } from '@onto/shared';
import {
  buildTestService,
  eventually,
  type PrivateKafka,
  startPrivateKafka,
  type TestService,
  testLogger,
} from '@onto/shared/testing';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../packages/admin/src/errors.js';
import { runCli, runCliIn } from '../packages/admin/test/cli.js';
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
    kafkaBrokers = kafka.brokers;
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

  it("lets a downstream consumer in: onto-admin consumers add makes a user that runs the guide's Node example, within its topics and group prefix; list, rotate, remove and a deployment's declaration manage them", {
    timeout: 900_000,
  }, async () => {
    const adminPassword = kafka.passwords.get('admin') as string;
    const dir = await mkdtemp(join(tmpdir(), 'onto-consumers-'));
    const adminConfig = join(dir, 'kafka-admin.properties');
    await writeFile(
      adminConfig,
      [
        'security.protocol=SASL_PLAINTEXT',
        'sasl.mechanism=SCRAM-SHA-512',
        `sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="${adminPassword}";`,
      ].join('\n'),
      { mode: 0o600 },
    );
    const cli = ['--json', '--kafka-brokers', kafka.brokers, '--kafka-config', adminConfig, '--topic-prefix', prefix];
    const added = await runCli(
      cli,
      'consumers',
      'add',
      'billing',
      '--topics',
      'onto.changes.objects',
      '--group-prefix',
      'billing-',
    );
    expect(added.code, added.err).toBe(0);
    expect(added.json()).toMatchObject({
      name: 'billing',
      mechanism: 'SCRAM-SHA-512',
      topics: [`${prefix}onto.changes.objects`],
    });
    const password = added.json().password as string;
    expect(
      (await runCli(cli, 'consumers', 'add', 'data', '--topics', 'domain.alerts', '--group-prefix', 'x-')).code,
    ).toBe(2);
    expect((await runCli(cli, 'consumers', 'add', 'other', '--topics', 'nope', '--group-prefix', 'x-')).code).toBe(2);

    // One event on the topic, as data's relay would publish it.
    const producer = new Kafka({
      brokers: [kafka.brokers],
      logLevel: logLevel.NOTHING,
      sasl: { mechanism: 'scram-sha-512', username: 'admin', password: adminPassword },
    }).producer();
    await producer.connect();
    const event = {
      event_id: '0193a000-0000-7000-8000-000000000001',
      type: 'object.updated',
      world_id: 'shop',
      payload: { pk: 'o-1' },
    };
    await producer.send({
      topic: `${prefix}onto.changes.objects`,
      messages: [
        {
          key: 'shop/Order/o-1',
          value: JSON.stringify(event),
          headers: { ce_type: 'object.updated', ce_subject: 'shop/Order/o-1' },
        },
      ],
    });
    await producer.disconnect();

    const example = fileURLToPath(new URL('../docs/examples/consume.mjs', import.meta.url));
    const consume = (env: Record<string, string>, topic = `${prefix}onto.changes.objects`, timeout = 90_000) =>
      promisify(execFile)('node', [example, kafka.brokers, topic], {
        env: { ...process.env, KAFKA_SASL_USERNAME: 'billing', ...env },
        timeout,
        killSignal: 'SIGKILL',
      });
    const { stdout } = await consume({ KAFKA_SASL_PASSWORD: password, KAFKA_GROUP: 'billing-orders' });
    expect(
      stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l)),
    ).toEqual([
      expect.objectContaining({ id: event.event_id, type: 'object.updated', subject: 'shop/Order/o-1', world: 'shop' }),
    ]);
    // Within its topics and group prefix, nothing else.
    expect(await canRead('billing', password, 'onto.changes.objects', 'billing-x')).toBe(true);
    expect(await canRead('billing', password, 'onto.changes.objects', 'other-x')).toMatch(/group/i);
    expect(await canRead('billing', password, 'domain.alerts', 'billing-x')).toMatch(/topic/i);

    await manage(cli, password, dir);
  });
});

/**
 * Whether `user` can read `topic` with `group` (ListOffsets needs Describe on the topic, OffsetFetch
 * on the group; Read grants both): true, or the broker's refusal.
 */
async function canRead(user: string, password: string, topic: string, group: string): Promise<true | string> {
  const admin = new Kafka({
    brokers: [kafkaBrokers],
    clientId: `can-read-${user}`,
    logLevel: logLevel.NOTHING,
    retry: { retries: 0 },
    sasl: { mechanism: 'scram-sha-512', username: user, password },
  }).admin();
  try {
    await admin.connect();
    await admin.fetchTopicOffsets(`users.${topic}`);
    await admin.fetchOffsets({ groupId: group, topics: [`users.${topic}`] });
    return true;
  } catch (error) {
    const e = error as { type?: string; message: string };
    return `${e.type ?? ''} ${e.message}`;
  } finally {
    await admin.disconnect().catch(() => {});
  }
}
let kafkaBrokers = '';

/** list, the refusals, rotate, the declaration applied (and again, and pruned), remove. */
async function manage(cli: string[], password: string, dir: string): Promise<void> {
  const listed = await runCli(cli, 'consumers', 'list');
  expect(listed.code, listed.err).toBe(0);
  expect(listed.json()).toEqual([
    { name: 'billing', topics: ['users.onto.changes.objects'], groupPrefixes: ['billing-'] },
  ]);

  // Refusals, each naming the argument.
  const refused = async (code: number, message: RegExp, ...args: string[]) => {
    const run = await runCli(cli, 'consumers', ...args);
    expect(run.code, `${args.join(' ')}: ${run.err}`).toBe(code);
    expect(run.err).toMatch(message);
  };
  await refused(EXIT.notFound, /<name>: no consumer nobody/, 'rotate', 'nobody');
  await refused(EXIT.notFound, /<name>: no consumer nobody/, 'remove', 'nobody');
  await refused(EXIT.usage, /<name>: a consumer's name must match/, 'rotate', 'Not A Name');
  await refused(EXIT.usage, /<name>: data is one of onto's own Kafka users/, 'remove', 'data');
  await refused(
    EXIT.usage,
    /--topics: nope is not one of onto's topics/,
    'add',
    'other',
    '--topics',
    'nope',
    '--group-prefix',
    'o-',
  );
  await refused(
    EXIT.usage,
    /--group-prefix: must be 1-200 of/,
    'add',
    'other',
    '--topics',
    'domain.alerts',
    '--group-prefix',
    'a b',
  );
  await refused(
    EXIT.usage,
    /--group-prefix: users\.data-x overlaps the groups of onto's own services/,
    'add',
    'other',
    '--topics',
    'domain.alerts',
    '--group-prefix',
    'users.data-x',
  );
  await refused(
    EXIT.usage,
    /<name>: consumer billing exists/,
    'add',
    'billing',
    '--topics',
    'domain.alerts',
    '--group-prefix',
    'b-',
  );

  // rotate: a new password, the old one refused at once.
  const rotated = await runCli(cli, 'consumers', 'rotate', 'billing');
  expect(rotated.code, rotated.err).toBe(0);
  const newPassword = rotated.json().password as string;
  expect(newPassword).not.toBe(password);
  expect(await canRead('billing', password, 'onto.changes.objects', 'billing-x')).toMatch(/SASL|auth/i);
  expect(await canRead('billing', newPassword, 'onto.changes.objects', 'billing-x')).toBe(true);

  // A deployment's declaration: a bad one changes nothing and names the field.
  const declare = async (name: string, doc: unknown) => {
    const file = join(dir, name);
    await writeFile(file, JSON.stringify(doc));
    return file;
  };
  const bad = await declare('bad.json', {
    consumers: [{ name: 'partner', topics: ['domain.nope'], groupPrefix: 'partner-', passwordFile: 'p' }],
  });
  await refused(EXIT.usage, /\/consumers\/0\/topics: domain\.nope is not one of onto's topics/, 'apply', '--file', bad);
  expect((await runCli(cli, 'consumers', 'list')).json()).toHaveLength(1);

  // billing gains a topic (its password from the file the deployment keeps); partner is created,
  // its password generated into its file.
  await writeFile(join(dir, 'billing.password'), `${newPassword}\n`, { mode: 0o600 });
  const declaration = await declare('consumers.json', {
    consumers: [
      {
        name: 'billing',
        topics: ['onto.changes.objects', 'domain.alerts'],
        groupPrefix: 'billing-',
        passwordFile: 'billing.password',
      },
      { name: 'partner', topics: ['domain.decisions'], groupPrefix: 'partner-', passwordFile: 'secrets/partner' },
    ],
  });
  const applied = await runCli(cli, 'consumers', 'apply', '--file', declaration);
  expect(applied.code, applied.err).toBe(0);
  expect(applied.json()).toEqual([
    expect.objectContaining({ name: 'billing', action: 'updated', passwordGenerated: false }),
    expect.objectContaining({
      name: 'partner',
      action: 'created',
      topics: ['users.domain.decisions'],
      passwordFile: join(dir, 'secrets/partner'),
      passwordGenerated: true,
    }),
  ]);
  expect((await stat(join(dir, 'secrets/partner'))).mode & 0o777).toBe(0o600);
  const partnerPassword = (await readFile(join(dir, 'secrets/partner'), 'utf8')).trim();
  expect(await canRead('partner', partnerPassword, 'domain.decisions', 'partner-1')).toBe(true);
  expect(await canRead('billing', newPassword, 'domain.alerts', 'billing-x')).toBe(true);

  // Applied again: nothing to change, and the passwords still the files'.
  const again = await runCli(cli, 'consumers', 'apply', '--file', declaration);
  expect(again.code, again.err).toBe(0);
  expect(again.json().map((r: { action: string }) => r.action)).toEqual(['unchanged', 'unchanged']);
  expect(await canRead('partner', partnerPassword, 'domain.decisions', 'partner-1')).toBe(true);

  // --prune: what the file no longer declares is removed.
  const onlyPartner = await declare('partner.json', {
    consumers: [
      { name: 'partner', topics: ['domain.decisions'], groupPrefix: 'partner-', passwordFile: 'secrets/partner' },
    ],
  });
  const pruned = await runCli(cli, 'consumers', 'apply', '--file', onlyPartner, '--prune');
  expect(pruned.code, pruned.err).toBe(0);
  expect(pruned.json().map((r: { name: string; action: string }) => `${r.name}:${r.action}`)).toEqual([
    'partner:unchanged',
    'billing:removed',
  ]);
  expect(await canRead('billing', newPassword, 'onto.changes.objects', 'billing-x')).toMatch(/SASL|auth/i);

  const removed = await runCli(cli, 'consumers', 'remove', 'partner');
  expect(removed.code, removed.err).toBe(0);
  expect(await canRead('partner', partnerPassword, 'domain.decisions', 'partner-1')).toMatch(/SASL|auth/i);
  expect((await runCli(cli, 'consumers', 'list')).json()).toEqual([]);
}

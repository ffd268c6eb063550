import { type EventEnvelope, type IncomingMessage, parseEvent } from '@onto/shared';
import {
  buildTestService,
  committedToEnd,
  createTestTopics,
  eventually,
  type TestService,
  testBroker,
  testEndpoints,
} from '@onto/shared/testing';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { controlService } from '../../control/test/control-service.js';
import * as intelligence from '../../intelligence/src/app.js';
import { ConfigSchema as IntelligenceConfig } from '../../intelligence/src/config.js';
import * as data from '../src/app.js';
import { ConfigSchema as DataConfig } from '../src/config.js';

export { expectProblem } from '../../control/test/control-service.js';

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface Call {
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

export type Stack = Awaited<ReturnType<typeof dataStack>>;

/**
 * control and data (and intelligence when asked) on a topic prefix of their own, as a client sees
 * them: the bootstrap admin's token, users with roles, worlds with a schema. Without
 * intelligence, worlds are provisioned by data alone, so control's provisioning timeout is pushed
 * out of the way.
 */
export async function dataStack(
  opts: {
    partitions?: number;
    dataEnv?: Record<string, string>;
    controlEnv?: Record<string, string>;
    intelligence?: boolean;
    intelligenceEnv?: Record<string, string>;
    /** A broker of the test's own (startPrivateKafka), for tests that stop it. */
    kafkaBrokers?: string;
  } = {},
) {
  const kafkaBrokers = opts.kafkaBrokers ?? testEndpoints().kafkaBrokers;
  const topics = await createTestTopics(kafkaBrokers, opts.partitions ?? 3);
  const env = { ONTO_TOPIC_PREFIX: topics.prefix, KAFKA_BROKERS: kafkaBrokers };
  const { service: c, admin } = await controlService({
    ...env,
    WORLD_PROVISION_TIMEOUT_MS: '600000',
    ...opts.controlEnv,
  });
  const d = (await buildTestService({ schema: DataConfig, app: data.default, migrations: data.migrations } as never, {
    ...env,
    ...opts.dataEnv,
  })) as TestService<unknown>;
  const i = opts.intelligence
    ? ((await buildTestService(
        { schema: IntelligenceConfig, app: intelligence.default, migrations: intelligence.migrations } as never,
        { ...env, ...opts.intelligenceEnv },
      )) as TestService<unknown>)
    : undefined;

  const inject = (app: FastifyInstance, method: Method, url: string, call: Call = {}) =>
    app.inject({
      method,
      url,
      ...(call.body === undefined ? {} : { payload: call.body as object }),
      headers: { authorization: `Bearer ${call.token ?? admin}`, ...call.headers },
    });

  const s = {
    control: c,
    data: d,
    prefix: topics.prefix,
    admin,
    controlCall: (method: Method, url: string, call?: Call) => inject(c.app, method, url, call),
    dataCall: (method: Method, url: string, call?: Call) => inject(d.app, method, url, call),
    intelligence: i,
    intelCall: (method: Method, url: string, call?: Call) => {
      if (!i) throw new Error('this stack has no intelligence service: dataStack({ intelligence: true })');
      return inject(i.app, method, url, call);
    },

    /** Polls `probe` until it returns something other than undefined (null and false count), at most `ms`. */
    async until<T>(what: string, probe: () => Promise<T | undefined>, ms = 15_000): Promise<T> {
      const found = await eventually(
        what,
        async () => {
          const value = await probe();
          return value === undefined ? undefined : { value };
        },
        { timeoutMs: ms },
      );
      return found.value;
    },

    /**
     * Waits until every service's identity replica knows the key that signed the admin's token:
     * until then a replica answers 503 (ADR 6), and under load it can hear the key after the
     * first test's first request.
     */
    async identityKnown(ms = 60_000): Promise<void> {
      const probes: [string, FastifyInstance, () => Promise<LightMyRequestResponse>][] = [
        ['data', d.app, () => s.dataCall('GET', '/v1/worlds/probe/schema-version')],
      ];
      if (i) probes.push(['intelligence', i.app, () => s.intelCall('GET', '/v1/worlds/probe/watermarks')]);
      for (const [name, app, probe] of probes) {
        let last: LightMyRequestResponse | undefined;
        try {
          await s.until(
            `${name} knowing control's signing key`,
            async () => {
              last = await probe();
              return last.statusCode === 503 ? undefined : true;
            },
            ms,
          );
        } catch (err) {
          // Say why: what the replica last answered and how its consumer fares.
          const replica = (app as unknown as { identityReplica: { describe(): unknown } }).identityReplica;
          throw new Error(
            `${(err as Error).message}; last answer ${last?.statusCode} ${last?.body}; replica ${JSON.stringify(replica.describe())}`,
          );
        }
      }
    },

    /** A world provisioned in data, with these object and link types, applied by data's replica. */
    async world(
      id: string,
      schema: {
        objectTypes?: Record<string, unknown>;
        linkTypes?: Record<string, unknown>;
        actionTypes?: Record<string, unknown>;
      } = {},
    ): Promise<number> {
      const created = await s.controlCall('POST', '/v1/worlds', { body: { id } });
      expect(created.statusCode, created.body).toBe(202);
      let version = 0;
      for (const [kind, types] of [
        ['object-types', schema.objectTypes ?? {}],
        ['link-types', schema.linkTypes ?? {}],
        ['action-types', schema.actionTypes ?? {}],
      ] as const) {
        for (const [name, body] of Object.entries(types)) {
          const res = await s.controlCall('PUT', `/v1/worlds/${id}/${kind}/${name}`, { body });
          expect(res.statusCode, res.body).toBe(200);
          version = res.json().version;
        }
      }
      await s.until(`world ${id} at schema version ${version} in data`, async () => {
        const res = await s.dataCall('GET', `/v1/worlds/${id}/schema-version`);
        return res.statusCode === 200 && res.json().version >= version ? true : undefined;
      });
      await s.until(`world ${id} provisioned in data`, async () => {
        const { rowCount } = await d.app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [id]);
        return rowCount ? true : undefined;
      });
      if (i) {
        await s.until(`world ${id} provisioned in intelligence at schema version ${version}`, async () => {
          const { rows } = await i.app.pg.query<{ provisioned: boolean; version: number }>(
            `SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) AS provisioned,
                    (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = $1) AS version`,
            [id],
          );
          return rows[0]?.provisioned && (rows[0]?.version ?? 0) >= version ? true : undefined;
        });
      }
      return version;
    },

    /** An access token of a new user holding `role` in `world`. */
    async user(id: string, world: string, role: 'viewer' | 'editor' | 'owner'): Promise<string> {
      expect((await s.controlCall('POST', '/v1/users', { body: { id } })).statusCode).toBe(201);
      const granted = await s.controlCall('PUT', `/v1/worlds/${world}/members/${id}`, { body: { role } });
      expect(granted.statusCode, granted.body).toBe(200);
      const apiToken = (await s.controlCall('POST', `/v1/users/${id}/tokens`, { body: {} })).json().token;
      const res = await c.app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken } });
      return res.json().accessToken as string;
    },

    /**
     * Every record on a (logical) topic until `done` says enough, and then on to the end of every
     * partition, so that a record beyond them (a duplicate, say) shows up too; read with a group of
     * its own.
     */
    async records(
      topic: string,
      done: (events: { record: IncomingMessage; event: EventEnvelope }[]) => boolean,
      ms = 15_000,
    ) {
      const seen: { record: IncomingMessage; event: EventEnvelope }[] = [];
      const broker = testBroker(kafkaBrokers);
      const reader = {
        groupId: `${topics.prefix}reader-${Math.random().toString(36).slice(2)}`,
        topic: `${topics.prefix}${topic}`,
      };
      const consumer = await broker.consumer({ groupId: reader.groupId, topics: [reader.topic], maxWaitTimeMs: 100 });
      await consumer.run(async (batch) => {
        for (const record of batch.messages) seen.push({ record, event: parseEvent(record.value) });
      });
      try {
        await eventually(`records on ${topic}`, () => done(seen), { timeoutMs: ms });
        await committedToEnd(broker, reader.groupId, reader.topic, { timeoutMs: ms });
      } finally {
        await consumer.disconnect();
      }
      return seen;
    },

    async close() {
      await Promise.all([c.close(), d.close(), i?.close()]);
      await topics.drop();
    },
  };
  await s.identityKnown();
  return s;
}

/**
 * Forks `id` from `from` through control (at now) in a stack without intelligence: control is told
 * the base is READY once data has provisioned it; answers the commit data forked at, once data has
 * recorded the fork and its schema.
 */
export async function forkThroughControl(s: Stack, id: string, from: string): Promise<number> {
  await s.until(`world ${from} in data`, async () =>
    (await s.data.app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [from])).rowCount ? true : undefined,
  );
  await s.control.app.pg.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [from]);
  const res = await s.controlCall('POST', '/v1/worlds', { body: { id, from: { world: from } } });
  expect(res.statusCode, res.body).toBe(202);
  return s.until(`fork ${id} provisioned in data`, async () => {
    const { rows } = await s.data.app.pg.query<{ base_seq: string }>(
      `SELECT w.base_seq FROM worlds w WHERE w.id = $1 AND EXISTS (SELECT 1 FROM schema_versions v WHERE v.world_id = w.id)`,
      [id],
    );
    return rows[0] ? Number(rows[0].base_seq) : undefined;
  });
}

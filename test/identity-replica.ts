import {
  BODY_LIMITS,
  cloudEventHeaders,
  encodeEvent,
  fastifyOptions,
  generateIdentityKeyPair,
  generateSigningKey,
  HEARTBEAT_KEY,
  loadConfig,
  type MigrationTrack,
  newEvent,
  parseIdentityPrivateKey,
  physicalTopic,
  signIdentityPayload,
} from '@onto/shared';
import {
  buildTestService,
  createTestDatabase,
  createTestTopics,
  eventually,
  testEndpoints,
  testIdentityEnv,
  testIdentityKeys,
} from '@onto/shared/testing';
import type { TObject } from '@sinclair/typebox';
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

const BOOTSTRAP = 'replica-bootstrap-token-0123456789';
const BOUND_MS = 2000;
// What may pass beyond the bound before a poll sees the refusal: one poll and a loaded machine.
const SLACK_MS = 750;

interface ReplicaService {
  name: string;
  schema: TObject;
  app: FastifyPluginAsync<{ config: never }>;
  migrations: MigrationTrack[];
}

/** The service as server.ts builds it, plus probe routes that need a role in a world or admin. */
export async function buildWithProbes(service: ReplicaService, prefix: string, env: Record<string, string> = {}) {
  const endpoints = testEndpoints();
  const db = await createTestDatabase(endpoints.postgresUrl, service.migrations);
  const config = loadConfig(service.schema, {
    DATABASE_URL: db.url,
    REDIS_URL: endpoints.redisUrl,
    KAFKA_BROKERS: endpoints.kafkaBrokers,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    ONTO_TOPIC_PREFIX: prefix,
    IDENTITY_MAX_LAG_MS: String(BOUND_MS), // the strict mode: these tests assert failing closed (ADR 22)
    ...testIdentityEnv(),
    ...env,
  }) as { LOG_LEVEL: string };
  const app = Fastify(fastifyOptions(config));
  await app.register(service.app, { config: config as never });
  await app.register(async (scoped) => {
    scoped.get('/v1/worlds/:world/probe', { preHandler: scoped.authorize({ role: 'viewer' }) }, async (r) => ({
      principal: r.principal,
    }));
    scoped.put(
      '/v1/worlds/:world/probe',
      { bodyLimit: BODY_LIMITS.small, preHandler: scoped.authorize({ role: 'editor' }) },
      async () => ({}),
    );
    scoped.get('/v1/probe/admin', { preHandler: scoped.authorize({ admin: true }) }, async () => ({}));
  });
  await app.ready();
  return {
    app,
    databaseUrl: db.url,
    async close() {
      await app.close();
      await db.drop();
    },
  };
}

/**
 * data and intelligence verify control's tokens against their replica of onto.identity: the same
 * suite for both, against a real control publishing on the same topic prefix.
 */
export function describeIdentityReplica(service: ReplicaService) {
  const controlService = SERVICES[0];

  describe(`${service.name} identity replica`, () => {
    let control: Awaited<ReturnType<typeof buildTestService>> | undefined;
    let replica: Awaited<ReturnType<typeof buildWithProbes>>;
    let dropTopics: () => Promise<void>;
    let prefix: string;
    let admin: string;

    const call = (
      app: FastifyInstance,
      method: 'GET' | 'POST' | 'PUT' | 'DELETE',
      url: string,
      token?: string,
      body?: unknown,
    ) =>
      app.inject({
        method,
        url,
        headers: token ? { authorization: `Bearer ${token}` } : {},
        ...(body === undefined ? {} : { payload: body as object }),
      });
    const controlApp = () => {
      if (!control) throw new Error('control is closed');
      return control.app;
    };
    const exchange = async (apiToken: string) => {
      const res = await call(controlApp(), 'POST', '/v1/auth/token', undefined, { apiToken });
      expect(res.statusCode, res.body).toBe(200);
      return res.json().accessToken as string;
    };
    async function user(id: string, roles: Record<string, string> = {}) {
      expect((await call(controlApp(), 'POST', '/v1/users', admin, { id })).statusCode).toBe(201);
      for (const [world, role] of Object.entries(roles)) {
        // Roles exist only in worlds that exist; READY here without the provisioning saga.
        await controlApp().pg.query(
          "INSERT INTO worlds (id, status, created_by) VALUES ($1, 'READY', 'admin') ON CONFLICT DO NOTHING",
          [world],
        );
        expect((await call(controlApp(), 'PUT', `/v1/worlds/${world}/members/${id}`, admin, { role })).statusCode).toBe(
          200,
        );
      }
      const issued = (await call(controlApp(), 'POST', `/v1/users/${id}/tokens`, admin, {})).json();
      return { apiTokenId: issued.id as string, access: await exchange(issued.token) };
    }
    /** Polls the replica until `status` answers; returns how long that took. */
    async function timeUntil(token: string, status: number, from = Date.now()) {
      await eventually(
        `${status} from ${service.name}`,
        async () => {
          const res = await call(replica.app, 'GET', '/v1/worlds/alpha/probe', token);
          return res.statusCode === status ? res : undefined;
        },
        { intervalMs: 20 }, // the time it took is measured
      );
      return Date.now() - from;
    }

    beforeAll(async () => {
      const topics = await createTestTopics(testEndpoints().kafkaBrokers, 1);
      prefix = topics.prefix;
      dropTopics = topics.drop;
      control = await buildTestService(controlService as never, {
        ONTO_TOPIC_PREFIX: prefix,
        ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
      });
      admin = await exchange(BOOTSTRAP);
      replica = await buildWithProbes(service, prefix);
      // Fresh once the consumer has joined and applied control's key and a heartbeat.
      await eventually('the replica to catch up', async () => {
        const res = await call(replica.app, 'GET', '/v1/probe/admin', admin);
        return res.statusCode === 200 ? res : undefined;
      });
    });
    afterAll(async () => {
      await replica?.close();
      await control?.close();
      await dropTopics?.();
    });

    it('authorises with the roles the token carries, per world', async () => {
      const ann = await user('ann', { alpha: 'viewer' });
      const read = await call(replica.app, 'GET', '/v1/worlds/alpha/probe', ann.access);
      expect(read.statusCode).toBe(200);
      expect(read.json().principal).toMatchObject({ userId: 'ann', admin: false, roles: { alpha: 'viewer' } });
      expect((await call(replica.app, 'PUT', '/v1/worlds/alpha/probe', ann.access)).statusCode).toBe(403);
      expect((await call(replica.app, 'GET', '/v1/worlds/beta/probe', ann.access)).statusCode).toBe(403);
      expect((await call(replica.app, 'GET', '/v1/probe/admin', ann.access)).statusCode).toBe(403);
      expect((await call(replica.app, 'PUT', '/v1/worlds/beta/probe', admin)).statusCode).toBe(200);
      const none = await call(replica.app, 'GET', '/v1/worlds/alpha/probe');
      expect(none.statusCode).toBe(401);
      expect(none.headers['www-authenticate']).toBe('Bearer');
    });

    it('refuses a revoked API token’s access tokens within the bound', async () => {
      const bob = await user('bob', { alpha: 'editor' });
      expect((await call(replica.app, 'PUT', '/v1/worlds/alpha/probe', bob.access)).statusCode).toBe(200);
      const started = Date.now();
      const revoked = await call(controlApp(), 'DELETE', `/v1/users/bob/tokens/${bob.apiTokenId}`, admin);
      expect(revoked.statusCode).toBe(204);
      const elapsed = await timeUntil(bob.access, 401, started);
      expect(elapsed).toBeLessThan(BOUND_MS + SLACK_MS);
      console.info(`${service.name}: a revoked API token was refused after ${elapsed} ms`);
      const res = await call(replica.app, 'GET', '/v1/worlds/alpha/probe', bob.access);
      expect(res.json()).toMatchObject({ status: 401, detail: 'the access token has been revoked' });
    });

    it('refuses a user’s tokens within the bound once a role is taken away', async () => {
      const carol = await user('carol', { alpha: 'owner' });
      expect((await call(replica.app, 'GET', '/v1/worlds/alpha/probe', carol.access)).statusCode).toBe(200);
      const started = Date.now();
      expect((await call(controlApp(), 'DELETE', '/v1/worlds/alpha/members/carol', admin)).statusCode).toBe(204);
      const elapsed = await timeUntil(carol.access, 401, started);
      expect(elapsed).toBeLessThan(BOUND_MS + SLACK_MS);
      console.info(`${service.name}: a taken role was refused after ${elapsed} ms`);
    });

    it('keeps revocations in its inbox and heartbeats out of it', async () => {
      const { Client } = (await import('pg')).default;
      const db = new Client({ connectionString: replica.databaseUrl });
      await db.connect();
      try {
        const { rows } = await db.query<{ event_type: string; n: number }>(
          'SELECT event_type, count(*)::int AS n FROM inbox GROUP BY event_type ORDER BY event_type',
        );
        expect(rows.map((r) => r.event_type)).toEqual([
          'identity.keys.published',
          'identity.roles.changed',
          'identity.token.revoked',
        ]);
        const state = await db.query('SELECT watermark_ms FROM identity_replica');
        expect(Number(state.rows[0]?.watermark_ms)).toBeGreaterThan(Date.now() - BOUND_MS);
      } finally {
        await db.end();
      }
    });

    /** What the replica has counted as refused for `reason` (onto_identity_refused_total). */
    async function refusedCount(reason: string): Promise<number> {
      const metric = await replica.app.metrics.getSingleMetric('onto_identity_refused_total')?.get();
      return metric?.values.find((v) => v.labels.reason === reason)?.value ?? 0;
    }
    /** Produces an identity event as anyone with access to the topic could: a plain kafkajs client. */
    async function produceAsStranger(
      type: 'identity.keys.published' | 'identity.heartbeat',
      payload: object,
      topicPrefix = prefix,
    ) {
      const key = type === 'identity.heartbeat' ? HEARTBEAT_KEY : 'keys';
      const event = newEvent({
        type,
        worldId: '*',
        key,
        version: 0,
        producer: 'control',
        producerSeq: 0,
        payload: payload as Record<string, unknown>,
      });
      const value = encodeEvent(event);
      const kafka = new Kafka({ brokers: testEndpoints().kafkaBrokers.split(','), logLevel: logLevel.NOTHING });
      const producer = kafka.producer();
      await producer.connect();
      try {
        await producer.send({
          topic: physicalTopic(topicPrefix, 'onto.identity'),
          messages: [
            { key, value, headers: { 'onto-event-id': event.event_id, ...cloudEventHeaders(event.event_id, value) } },
          ],
        });
      } finally {
        await producer.disconnect();
      }
    }
    async function replicaState(databaseUrl = replica.databaseUrl) {
      const { Client } = (await import('pg')).default;
      const db = new Client({ connectionString: databaseUrl });
      await db.connect();
      try {
        const keys = await db.query<{ kid: string }>('SELECT kid FROM identity_keys');
        const mark = await db.query<{ watermark_ms: string }>('SELECT watermark_ms FROM identity_replica');
        return { kids: keys.rows.map((r) => r.kid), watermarkMs: Number(mark.rows[0]?.watermark_ms) };
      } finally {
        await db.end();
      }
    }

    it('refuses a signing key and a heartbeat not signed by the identity key', async () => {
      const forged = await generateSigningKey();
      const strangerIdentity = parseIdentityPrivateKey(generateIdentityKeyPair().privateKey);
      const before = await refusedCount('signature');
      const aheadMs = 30_000; // within the clock bound: refused for its signature alone
      await produceAsStranger('identity.keys.published', { keys: [forged.publicJwk] });
      await produceAsStranger(
        'identity.heartbeat',
        signIdentityPayload(strangerIdentity, { watermark: Date.now() + aheadMs, keys: [forged.publicJwk] }),
      );
      await eventually('both forgeries counted', async () =>
        (await refusedCount('signature')) >= before + 2 ? true : undefined,
      );
      const state = await replicaState();
      expect(state.kids).not.toContain(forged.kid);
      expect(state.watermarkMs).toBeLessThan(Date.now() + aheadMs / 2);
      expect(replica.app.identityReplica.describe().keys).not.toContain(forged.kid);
      // Genuine heartbeats still land: the replica stays fresh.
      expect((await call(replica.app, 'GET', '/v1/probe/admin', admin)).statusCode).toBe(200);
    });

    it('accepts what the next identity key signs once ONTO_IDENTITY_PUBLIC_KEY_NEXT names it (a rotation), and still the current one', async () => {
      // A replica of its own (its own topics: the suite's replica holds the consumer group there).
      const topics = await createTestTopics(testEndpoints().kafkaBrokers, 1);
      const next = generateIdentityKeyPair();
      const rotating = await buildWithProbes(service, topics.prefix, { ONTO_IDENTITY_PUBLIC_KEY_NEXT: next.publicKey });
      try {
        const [byNext, byStranger] = [await generateSigningKey(), await generateSigningKey()];
        const sign = (privateKey: string, payload: Record<string, unknown>) =>
          signIdentityPayload(parseIdentityPrivateKey(privateKey), payload);
        await produceAsStranger(
          'identity.keys.published',
          sign(next.privateKey, { keys: [byNext.publicJwk] }),
          topics.prefix,
        );
        const stranger = generateIdentityKeyPair().privateKey;
        await produceAsStranger(
          'identity.keys.published',
          sign(stranger, { keys: [byStranger.publicJwk] }),
          topics.prefix,
        );
        const beat = Date.now();
        await produceAsStranger(
          'identity.heartbeat',
          sign(testIdentityKeys().privateKey, { watermark: beat, keys: [] }),
          topics.prefix,
        );
        // The next key's and the current key's are taken; a stranger's is not.
        const state = await eventually("the next key's publication and the current key's heartbeat", async () => {
          const st = await replicaState(rotating.databaseUrl);
          return st.kids.includes(byNext.kid) && st.watermarkMs >= beat ? st : undefined;
        });
        expect(state.kids).not.toContain(byStranger.kid);
        // Without ONTO_IDENTITY_PUBLIC_KEY_NEXT the next key's signature is refused (the suite's replica).
        const before = await refusedCount('signature');
        await produceAsStranger('identity.keys.published', sign(next.privateKey, { keys: [byNext.publicJwk] }));
        await eventually('refused where the next key is not configured', async () =>
          (await refusedCount('signature')) >= before + 1 ? true : undefined,
        );
        expect((await replicaState()).kids).not.toContain(byNext.kid);
      } finally {
        await rotating.close();
        await topics.drop();
      }
    });

    it('refuses a genuinely signed heartbeat whose watermark is far ahead of its clock', async () => {
      const identityKey = parseIdentityPrivateKey(testIdentityKeys().privateKey);
      const before = await refusedCount('future_watermark');
      const future = Date.now() + 10 * 60_000;
      await produceAsStranger('identity.heartbeat', signIdentityPayload(identityKey, { watermark: future, keys: [] }));
      await eventually('the future heartbeat counted', async () =>
        (await refusedCount('future_watermark')) >= before + 1 ? true : undefined,
      );
      expect((await replicaState()).watermarkMs).toBeLessThan(future - 60_000);
    });

    it('fails closed with 503 once control falls silent for longer than the bound', async () => {
      const dave = await user('dave', { alpha: 'viewer' });
      expect((await call(replica.app, 'GET', '/v1/worlds/alpha/probe', dave.access)).statusCode).toBe(200);
      const silent = Date.now();
      await control?.close();
      control = undefined;
      const elapsed = await timeUntil(dave.access, 503, silent);
      expect(elapsed).toBeLessThan(BOUND_MS + SLACK_MS + 500);
      const res = await call(replica.app, 'GET', '/v1/worlds/alpha/probe', dave.access);
      expect(res.headers['retry-after']).toBe('2');
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.json()).toMatchObject({ status: 503, detail: expect.stringContaining('behind control') });
      // A token that is not valid at all is still refused as such.
      expect((await call(replica.app, 'GET', '/v1/worlds/alpha/probe', 'x.y.z')).statusCode).toBe(401);
    });

    it('fails closed with 503 on a topic prefix no control publishes to', async () => {
      const topics = await createTestTopics(testEndpoints().kafkaBrokers, 1);
      const lonely = await buildWithProbes(service, topics.prefix);
      try {
        const res = await call(lonely.app, 'GET', '/v1/probe/admin', admin);
        expect(res.statusCode).toBe(503);
        expect(res.headers['retry-after']).toBeDefined();
      } finally {
        await lonely.close();
        await topics.drop();
      }
    });
  });
}

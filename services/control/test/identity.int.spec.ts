import { createHash } from 'node:crypto';
import {
  type EventEnvelope,
  fastifyOptions,
  type IncomingMessage,
  loadConfig,
  parseEvent,
  signAccessToken,
} from '@onto/shared';
import {
  createTestDatabase,
  createTestTopics,
  eventually,
  outboxAudit,
  testBroker,
  testEndpoints,
  testIdentityEnv,
} from '@onto/shared/testing';
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import control, { migrations } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import { activeSigningKey } from './signing-keys.js';

const BOOTSTRAP = 'test-bootstrap-token-0123456789abcdef';

/** Control as server.ts builds it, plus a probe route that needs the editor role in a world. */
async function buildControl(prefix: string) {
  const endpoints = testEndpoints();
  const db = await createTestDatabase(endpoints.postgresUrl, migrations);
  const config = loadConfig(ConfigSchema, {
    DATABASE_URL: db.url,
    REDIS_URL: endpoints.redisUrl,
    KAFKA_BROKERS: endpoints.kafkaBrokers,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    ONTO_TOPIC_PREFIX: prefix,
    ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
    ...testIdentityEnv(),
  });
  const app = Fastify(fastifyOptions(config));
  await app.register(control, { config });
  await app.register(async (scoped) => {
    scoped.get('/v1/worlds/:world/probe', { preHandler: scoped.authorize({ role: 'editor' }) }, async (request) => ({
      principal: request.principal,
    }));
  });
  await app.ready();
  return {
    app,
    async close() {
      await app.close();
      await db.drop();
    },
  };
}

const claimsOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString());
const headerOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[0] ?? '', 'base64url').toString());

describe('control identity', () => {
  let app: FastifyInstance;
  let close: () => Promise<void>;
  let dropTopics: () => Promise<void>;
  let prefix: string;
  let admin: string;

  const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, token?: string, body?: unknown) =>
    app.inject({
      method,
      url,
      headers: token ? { authorization: `Bearer ${token}` } : {},
      ...(body === undefined ? {} : { payload: body as object }),
    });
  const exchange = async (apiToken: string) => {
    const res = await call('POST', '/v1/auth/token', undefined, { apiToken });
    expect(res.statusCode, res.body).toBe(200);
    return res.json().accessToken as string;
  };
  const auditFor = async (requestId: string) =>
    (await outboxAudit(app.pg, requestId)).map(({ actor, action, world, target }) => ({
      actor,
      action,
      world,
      target,
    }));
  const requestId = (res: LightMyRequestResponse) => String(res.headers['x-request-id']);
  const outboxEvents = async () =>
    (
      await app.pg.query<{ topic: string; partition_key: string; body: string }>(
        'SELECT topic, partition_key, body FROM outbox ORDER BY id',
      )
    ).rows.map((r) => ({ topic: r.topic, key: r.partition_key, event: JSON.parse(r.body) as EventEnvelope }));

  /** A user with a fresh API token, exchanged: [api token id, access token]. */
  async function userWithToken(id: string): Promise<{ apiTokenId: string; apiToken: string; access: string }> {
    const created = await call('POST', '/v1/users', admin, { id });
    expect([201, 409]).toContain(created.statusCode);
    const token = await call('POST', `/v1/users/${id}/tokens`, admin, { name: 'test' });
    expect(token.statusCode, token.body).toBe(201);
    return { apiTokenId: token.json().id, apiToken: token.json().token, access: await exchange(token.json().token) };
  }

  beforeAll(async () => {
    const topics = await createTestTopics(testEndpoints().kafkaBrokers, 1);
    prefix = topics.prefix;
    dropTopics = topics.drop;
    ({ app, close } = await buildControl(prefix));
    admin = await exchange(BOOTSTRAP);
    // Roles exist only in worlds that exist; these are READY without the provisioning saga.
    await app.pg.query("INSERT INTO worlds (id, status, created_by) SELECT unnest($1::text[]), 'READY', 'admin'", [
      ['alpha', 'beta', 'gamma'],
    ]);
  });
  afterAll(async () => {
    await close?.();
    await dropTopics?.();
  });

  it('makes the bootstrap token the first administrator, once, with an EdDSA access token', async () => {
    const header = headerOf(admin);
    expect(header).toMatchObject({ alg: 'EdDSA', typ: 'at+jwt', kid: expect.any(String) });
    const claims = claimsOf(admin);
    expect(claims).toMatchObject({ sub: 'admin', adm: true, roles: {}, iss: 'onto-control', aud: 'onto', gen: 0 });
    expect(claims.exp - claims.iat).toBe(900);

    const again = await call('POST', '/v1/auth/token', undefined, { apiToken: BOOTSTRAP });
    expect(again.statusCode).toBe(200);
    expect(await auditFor(requestId(again))).toEqual([
      { actor: 'admin', action: 'identity.token.exchange', world: null, target: expect.any(String) },
    ]);
    const { rows } = await app.pg.query(
      `SELECT (SELECT count(*)::int FROM users) AS users, (SELECT count(*)::int FROM platform_admins) AS admins,
              (SELECT count(*)::int FROM api_tokens) AS tokens`,
    );
    expect(rows[0]).toEqual({ users: 1, admins: 1, tokens: 1 });
    // The first exchange made the administrator: its record says so, and only its record.
    const bootstraps = (await outboxAudit(app.pg)).filter((a) => a.detail.bootstrap === true);
    expect(bootstraps.map((a) => [a.actor, a.action])).toEqual([['admin', 'identity.token.exchange']]);

    const me = await call('GET', '/v1/users/admin', admin);
    expect(me.json()).toMatchObject({ id: 'admin', admin: true, roles: {} });
  });

  it('creates users and API tokens, stores only their hash, and exchanges them', async () => {
    const created = await call('POST', '/v1/users', admin, { id: 'ann', displayName: 'Ann' });
    expect(created.statusCode).toBe(201);
    expect(created.json()).toMatchObject({ id: 'ann', displayName: 'Ann', admin: false, roles: {} });
    expect(await auditFor(requestId(created))).toEqual([
      { actor: 'admin', action: 'identity.user.create', world: null, target: 'ann' },
    ]);
    expect((await call('POST', '/v1/users', admin, { id: 'ann' })).statusCode).toBe(409);

    const issued = await call('POST', '/v1/users/ann/tokens', admin, { name: 'laptop' });
    expect(issued.statusCode).toBe(201);
    const { id, token } = issued.json();
    expect(token).toMatch(/^onto_[A-Za-z0-9_-]{43}$/);
    expect(await auditFor(requestId(issued))).toEqual([
      { actor: 'admin', action: 'identity.token.create', world: null, target: id },
    ]);
    const stored = await app.pg.query<{ hash: Buffer }>('SELECT hash FROM api_tokens WHERE id = $1', [id]);
    expect(stored.rows[0]?.hash.equals(createHash('sha256').update(token).digest())).toBe(true);
    const listed = await call('GET', '/v1/users/ann/tokens', admin);
    expect(listed.json().tokens).toEqual([expect.objectContaining({ id, name: 'laptop', revokedAt: null })]);
    expect(JSON.stringify(listed.json())).not.toContain(token);

    const access = await exchange(token);
    expect(claimsOf(access)).toMatchObject({ sub: 'ann', adm: false, ati: id, roles: {} });
    expect((await call('GET', '/v1/users/ann', access)).statusCode).toBe(200);
    expect((await call('GET', '/v1/users/admin', access)).statusCode).toBe(403);
    expect((await call('POST', '/v1/users', access, { id: 'mallory' })).statusCode).toBe(403);
    expect((await call('POST', '/v1/users/admin/tokens', access, {})).statusCode).toBe(403);
    // Users manage their own tokens.
    expect((await call('POST', '/v1/users/ann/tokens', access, {})).statusCode).toBe(201);
  });

  it('authorises by world role: viewer < editor < owner, per world, admin passes', async () => {
    const bob = await userWithToken('bob');
    const grant = await call('PUT', '/v1/worlds/alpha/members/bob', admin, { role: 'viewer' });
    expect(grant.json()).toEqual({ world: 'alpha', userId: 'bob', role: 'viewer', changed: true });
    expect(await auditFor(requestId(grant))).toEqual([
      { actor: 'admin', action: 'identity.member.put', world: 'alpha', target: 'bob' },
    ]);
    const viewer = await exchange(bob.apiToken);
    expect(claimsOf(viewer).roles).toEqual({ alpha: 'viewer' });
    expect((await call('GET', '/v1/worlds/alpha/members', viewer)).statusCode).toBe(200);
    const refused = await call('GET', '/v1/worlds/alpha/probe', viewer);
    expect(refused.statusCode).toBe(403);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect((await call('PUT', '/v1/worlds/alpha/members/ann', viewer, { role: 'viewer' })).statusCode).toBe(403);
    expect((await call('GET', '/v1/worlds/beta/members', viewer)).statusCode).toBe(403);
    expect((await call('GET', '/v1/worlds/beta/probe', admin)).statusCode).toBe(200);

    // Upgrades need no new token in control, which authorises from its own tables.
    await call('PUT', '/v1/worlds/alpha/members/bob', admin, { role: 'owner' });
    expect((await call('GET', '/v1/worlds/alpha/probe', viewer)).statusCode).toBe(200);
    const byOwner = await call('PUT', '/v1/worlds/alpha/members/ann', viewer, { role: 'editor' });
    expect(byOwner.statusCode).toBe(200);
    expect((await call('PUT', '/v1/worlds/alpha/members/ann', viewer, { role: 'editor' })).json().changed).toBe(false);
    const members = await call('GET', '/v1/worlds/alpha/members', viewer);
    expect(members.json().members).toEqual([
      { userId: 'ann', role: 'editor' },
      { userId: 'bob', role: 'owner' },
    ]);
  });

  it('revokes a user’s access tokens when a role is weakened or taken, and announces it', async () => {
    const carol = await userWithToken('carol');
    await call('PUT', '/v1/worlds/gamma/members/carol', admin, { role: 'owner' });
    const owner = await exchange(carol.apiToken);
    expect((await call('GET', '/v1/worlds/gamma/probe', owner)).statusCode).toBe(200);

    const weakened = await call('PUT', '/v1/worlds/gamma/members/carol', admin, { role: 'viewer' });
    expect(weakened.statusCode).toBe(200);
    expect((await call('GET', '/v1/worlds/gamma/members', owner)).statusCode).toBe(401);
    const viewer = await exchange(carol.apiToken);
    expect(claimsOf(viewer)).toMatchObject({ gen: 1, roles: { gamma: 'viewer' } });

    const removed = await call('DELETE', '/v1/worlds/gamma/members/carol', admin);
    expect(removed.statusCode).toBe(204);
    expect(await auditFor(requestId(removed))).toEqual([
      { actor: 'admin', action: 'identity.member.delete', world: 'gamma', target: 'carol' },
    ]);
    expect((await call('GET', '/v1/users/carol', viewer)).statusCode).toBe(401);
    expect((await call('DELETE', '/v1/worlds/gamma/members/carol', admin)).statusCode).toBe(404);

    const events = (await outboxEvents()).filter(
      (e) => e.event.type === 'identity.roles.changed' && e.event.payload.userId === 'carol',
    );
    expect(events.map((e) => [e.topic, e.key, e.event.payload.role, e.event.payload.minGeneration])).toEqual([
      [`${prefix}onto.identity`, 'carol', 'owner', 0],
      [`${prefix}onto.identity`, 'carol', 'viewer', 1],
      [`${prefix}onto.identity`, 'carol', null, 2],
    ]);
  });

  it('revokes an API token at once: its access tokens are refused on the next request', async () => {
    const dave = await userWithToken('dave');
    expect((await call('GET', '/v1/users/dave', dave.access)).statusCode).toBe(200);
    const revoked = await call('DELETE', `/v1/users/dave/tokens/${dave.apiTokenId}`, admin);
    expect(revoked.statusCode).toBe(204);
    const next = await call('GET', '/v1/users/dave', dave.access);
    expect(next.statusCode).toBe(401);
    expect(next.json().detail).toBe('the access token has been revoked');
    expect((await call('POST', '/v1/auth/token', undefined, { apiToken: dave.apiToken })).statusCode).toBe(401);
    expect(await auditFor(requestId(revoked))).toEqual([
      { actor: 'admin', action: 'identity.token.revoke', world: null, target: dave.apiTokenId },
    ]);
    // Revoking again is a no-op: no second event.
    expect((await call('DELETE', `/v1/users/dave/tokens/${dave.apiTokenId}`, admin)).statusCode).toBe(204);
    const events = (await outboxEvents()).filter((e) => e.event.type === 'identity.token.revoked');
    expect(events.filter((e) => e.event.payload.apiTokenId === dave.apiTokenId)).toEqual([
      {
        topic: `${prefix}onto.identity`,
        key: 'dave',
        event: expect.objectContaining({ payload: { userId: 'dave', apiTokenId: dave.apiTokenId } }),
      },
    ]);
  });

  it('signs out one access token', async () => {
    const erin = await userWithToken('erin');
    const other = await exchange(erin.apiToken);
    expect((await call('DELETE', '/v1/auth/token', erin.access)).statusCode).toBe(204);
    expect((await call('GET', '/v1/users/erin', erin.access)).statusCode).toBe(401);
    expect((await call('GET', '/v1/users/erin', other)).statusCode).toBe(200);
  });

  it('refuses expired, tampered and unsigned access tokens', async () => {
    const key = await activeSigningKey(app);
    const { apiTokenId } = await userWithToken('frank');
    const grant = { userId: 'frank', apiTokenId, generation: 0, admin: false, roles: {}, ttlSeconds: 60 };
    const valid = await signAccessToken(key, grant);
    expect((await call('GET', '/v1/users/frank', valid.token)).statusCode).toBe(200);
    const expired = await signAccessToken(key, { ...grant, issuedAt: Math.floor(Date.now() / 1000) - 61 });
    const res = await call('GET', '/v1/users/frank', expired.token);
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer');
    expect(res.json().detail).toBe('the access token has expired');

    const [h, p, s] = valid.token.split('.') as [string, string, string];
    const forged = Buffer.from(JSON.stringify({ ...claimsOf(valid.token), adm: true })).toString('base64url');
    expect((await call('GET', '/v1/users/admin', `${h}.${forged}.${s}`)).statusCode).toBe(401);
    const none = Buffer.from(JSON.stringify({ ...headerOf(valid.token), alg: 'none' })).toString('base64url');
    expect((await call('GET', '/v1/users/frank', `${none}.${p}.`)).statusCode).toBe(401);
  });

  it('answers bad input on every endpoint with a 4xx problem, never a 5xx', async () => {
    const cases: [string, string, string | undefined, unknown, number][] = [
      ['POST', '/v1/auth/token', undefined, {}, 400],
      ['POST', '/v1/auth/token', undefined, { apiToken: 5 }, 400],
      ['POST', '/v1/auth/token', undefined, { apiToken: 'x', scope: 'all' }, 400],
      ['POST', '/v1/auth/token', undefined, { apiToken: 'onto_unknown' }, 401],
      ['POST', '/v1/users', admin, { id: 'Not A Slug' }, 400],
      ['POST', '/v1/users', admin, { id: 'gina', admin: 'yes' }, 400],
      ['POST', '/v1/users', admin, { id: 'gina', role: 'owner' }, 400],
      ['POST', '/v1/users', undefined, { id: 'gina' }, 401],
      ['GET', '/v1/users/NOPE!', admin, undefined, 400],
      ['GET', '/v1/users/nobody', admin, undefined, 404],
      ['GET', '/v1/users/nobody/tokens', admin, undefined, 404],
      ['POST', '/v1/users/nobody/tokens', admin, {}, 404],
      ['POST', '/v1/users/ann/tokens', admin, { name: '' }, 400],
      ['POST', '/v1/users/ann/tokens', admin, { name: 'x', expires: 1 }, 400],
      ['POST', '/v1/users/ann/tokens', admin, { name: 'a\u0000b' }, 400],
      ['POST', '/v1/users', admin, { id: 'nul', displayName: 'a\u0000b' }, 400],
      ['DELETE', '/v1/users/ann/tokens/not-a-uuid', admin, undefined, 400],
      ['DELETE', '/v1/users/ann/tokens/00000000-0000-4000-8000-000000000000', admin, undefined, 404],
      ['PUT', '/v1/worlds/Bad_World/members/ann', admin, { role: 'viewer' }, 400],
      ['PUT', '/v1/worlds/alpha/members/ann', admin, { role: 'boss' }, 400],
      ['PUT', '/v1/worlds/alpha/members/ann', admin, {}, 400],
      ['PUT', '/v1/worlds/alpha/members/nobody', admin, { role: 'viewer' }, 404],
      ['DELETE', '/v1/worlds/alpha/members/nobody', admin, undefined, 404],
      ['GET', '/v1/worlds/alpha/members', undefined, undefined, 401],
      ['DELETE', '/v1/auth/token', undefined, undefined, 401],
    ];
    for (const [method, url, token, body, status] of cases) {
      const res = await call(method as 'GET', url, token, body);
      expect(res.statusCode, `${method} ${url} ${JSON.stringify(body)}: ${res.body}`).toBe(status);
      expect(res.headers['content-type'], `${method} ${url}`).toMatch(/^application\/problem\+json/);
    }
    const malformed = await app.inject({
      method: 'POST',
      url: '/v1/auth/token',
      headers: { 'content-type': 'application/json' },
      payload: '{"apiToken": ',
    });
    expect(malformed.statusCode).toBe(400);
  });

  it('documents the identity routes, bearer-protected, in the OpenAPI document', async () => {
    const doc = (await app.inject({ method: 'GET', url: '/docs/json' })).json();
    expect(doc.paths['/v1/auth/token'].post.security).toBeUndefined();
    expect(doc.paths['/v1/users'].post.security).toEqual([{ bearer: [] }]);
    expect(doc.paths['/v1/users/{userId}/tokens'].post.responses).toHaveProperty('201');
    expect(doc.paths['/v1/worlds/{world}/members/{userId}'].put.requestBody).toBeDefined();
  });

  it('holds the heartbeat watermark at the start of a transaction still in flight', async () => {
    const topic = `${prefix}onto.identity`;
    const seen: IncomingMessage[] = [];
    const consumer = await testBroker(testEndpoints().kafkaBrokers).consumer({
      groupId: `${prefix}in-flight-reader`,
      topics: [topic],
      fromBeginning: true,
    });
    const watermarks = () =>
      seen
        .filter((m) => m.key === 'heartbeat')
        .map((m) => (parseEvent(m.value).payload as { watermark: number }).watermark);
    // A transaction that could still commit an identity event stamped with its start.
    const writer = await app.pg.connect();
    try {
      await consumer.run(async (batch) => {
        seen.push(...batch.messages);
      });
      await writer.query('BEGIN');
      const { rows } = await writer.query<{ started: number }>(
        'SELECT floor(extract(epoch FROM transaction_timestamp()) * 1000)::int8 AS started',
      );
      const started = Number(rows[0]?.started);
      const count = watermarks().length;
      await eventually('three heartbeats while it is open', () => watermarks().length >= count + 3, {
        timeoutMs: 10_000,
      });
      for (const watermark of watermarks().slice(count)) expect(watermark).toBeLessThanOrEqual(started);
      await writer.query('COMMIT');
      await eventually('a heartbeat past it once it ended', () => (watermarks().at(-1) ?? 0) > started, {
        timeoutMs: 10_000,
      });
    } finally {
      await writer.query('ROLLBACK').catch(() => {});
      writer.release();
      await consumer.disconnect();
    }
  });

  it('publishes heartbeats whose watermark waits for pending identity events', async () => {
    const topic = `${prefix}onto.identity`;
    const seen: IncomingMessage[] = [];
    const consumer = await testBroker(testEndpoints().kafkaBrokers).consumer({
      groupId: `${prefix}reader`,
      topics: [topic],
      fromBeginning: true,
    });
    const beats = () =>
      seen
        .filter((m) => m.key === 'heartbeat')
        .map((m) => parseEvent(m.value))
        .map((e) => e.payload as { watermark: number; keys: { kid: string }[] });
    const until = (what: string, check: () => boolean) => eventually(what, check, { timeoutMs: 10_000 });
    try {
      await consumer.run(async (batch) => {
        seen.push(...batch.messages);
      });
      await until('a heartbeat', () => beats().length > 0);
      const { rows } = await app.pg.query<{ kid: string }>('SELECT kid FROM signing_keys');
      expect(
        beats()
          .at(-1)
          ?.keys.map((k) => k.kid),
      ).toEqual([rows[0]?.kid]);
      const published = seen.map((m) => parseEvent(m.value)).find((e) => e.type === 'identity.keys.published');
      expect(published?.payload).toEqual({
        keys: [expect.objectContaining({ kid: rows[0]?.kid, crv: 'Ed25519' })],
        signature: expect.any(String),
      });

      // With the relay stopped, a revocation stays pending and holds the watermark back.
      await app.relay.stop();
      const hank = await userWithToken('hank');
      const before = Date.now();
      await call('DELETE', `/v1/users/hank/tokens/${hank.apiTokenId}`, admin);
      const { rows: pending } = await app.pg.query<{ created: number }>(
        `SELECT floor(extract(epoch FROM min(o.created_at)) * 1000)::int8 AS created
           FROM outbox_pending p JOIN outbox o ON o.id = p.id WHERE o.topic = $1`,
        [topic],
      );
      const heldAt = pending[0]?.created ?? 0;
      expect(heldAt).toBeGreaterThan(0);
      const count = beats().length;
      await until('two more heartbeats', () => beats().length >= count + 2);
      expect(beats().at(-1)?.watermark).toBeLessThanOrEqual(heldAt);

      // When the revocation itself was written: hank's other identity events (user, token) were
      // held too and may be published in an earlier batch, after which a heartbeat rightly passes
      // heldAt but not the revocation.
      const { rows: revoked } = await app.pg.query<{ created: number }>(
        `SELECT floor(extract(epoch FROM o.created_at) * 1000)::int8 AS created
           FROM outbox o WHERE o.topic = $1 AND o.body LIKE '%identity.token.revoked%' AND o.body LIKE '%' || $2 || '%'`,
        [topic, hank.apiTokenId],
      );
      const revokedAt = Number(revoked[0]?.created ?? 0);
      expect(revokedAt).toBeGreaterThanOrEqual(heldAt);

      await app.relay.start();
      await until('a heartbeat past the revocation', () => (beats().at(-1)?.watermark ?? 0) > revokedAt);
      // The revocation reached the partition before the first heartbeat whose watermark passed it.
      const revocation = seen.findIndex(
        (m) => m.value?.toString().includes(hank.apiTokenId) && parseEvent(m.value).type === 'identity.token.revoked',
      );
      const firstPast = seen.findIndex(
        (m) => m.key === 'heartbeat' && (parseEvent(m.value).payload as { watermark: number }).watermark > revokedAt,
      );
      expect(revocation).toBeGreaterThanOrEqual(0);
      expect(revocation).toBeLessThan(firstPast);
      expect(beats().at(-1)?.watermark).toBeGreaterThanOrEqual(before - 1000);
      expect(new Set(seen.map((m) => m.partition))).toEqual(new Set([0]));
    } finally {
      await app.relay.start();
      await consumer.disconnect();
    }
  });
});

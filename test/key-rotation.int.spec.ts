import { buildTestService, createTestTopics, eventually, testEndpoints } from '@onto/shared/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildWithProbes } from './identity-replica.js';
import { SERVICES } from './services.js';

const BOOTSTRAP = 'rotation-bootstrap-token-0123456789';
const GRACE_SECONDS = 4;
/** How long a new key is announced before it signs here: well above the replicas' usual lag. */
const ANNOUNCE_MS = 3000;

const kidOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[0] ?? '', 'base64url').toString()).kid as string;

/**
 * Rotating the token-signing key (ADR 42) on control's admin route: a token signed by the retired
 * key still works for the grace period in control, data and intelligence, then in none of them.
 */
describe('signing-key rotation across the services', () => {
  let control: Awaited<ReturnType<typeof buildTestService>>;
  let replicas: { name: string; app: FastifyInstance; close(): Promise<void> }[] = [];
  let dropTopics: () => Promise<void>;
  let admin: string;

  const call = (app: FastifyInstance, method: 'GET' | 'POST', url: string, token?: string, body?: unknown) =>
    app.inject({
      method,
      url,
      headers: token ? { authorization: `Bearer ${token}` } : {},
      ...(body === undefined ? {} : { payload: body as object }),
    });
  const exchange = async (apiToken: string) => {
    const res = await call(control.app, 'POST', '/v1/auth/token', undefined, { apiToken });
    expect(res.statusCode, res.body).toBe(200);
    return res.json().accessToken as string;
  };
  /** The status each service answers a request with `token` (control's own route, the replicas' probe). */
  const statuses = async (token: string) => [
    (await call(control.app, 'GET', '/v1/users/admin', token)).statusCode,
    ...(await Promise.all(replicas.map(async (r) => (await call(r.app, 'GET', '/v1/probe/admin', token)).statusCode))),
  ];
  const everywhere = (token: string, status: number, what: string) =>
    eventually(what, async () => ((await statuses(token)).every((s) => s === status) ? true : undefined), {
      timeoutMs: 15_000,
      intervalMs: 50,
    });

  beforeAll(async () => {
    const topics = await createTestTopics(testEndpoints().kafkaBrokers, 1);
    dropTopics = topics.drop;
    control = await buildTestService(SERVICES[0] as never, {
      ONTO_TOPIC_PREFIX: topics.prefix,
      ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
      SIGNING_KEY_ANNOUNCE_MS: String(ANNOUNCE_MS),
      // Requests run in a loop below: the limit of one token's exchanges is not what is tested.
      TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN: '100000',
      TOKEN_EXCHANGES_PER_MINUTE_PER_IP: '100000',
    });
    admin = await exchange(BOOTSTRAP);
    for (const service of [SERVICES[1], SERVICES[2]]) {
      replicas.push({ name: service.name, ...(await buildWithProbes(service as never, topics.prefix)) });
    }
    await everywhere(admin, 200, 'every replica to learn the first key');
  });
  afterAll(async () => {
    for (const r of replicas) await r.close();
    replicas = [];
    await control?.close();
    await dropTopics?.();
  });

  it('refuses bad rotation requests with problem+json, and non-administrators', async () => {
    for (const body of [{ graceSeconds: -1 }, { graceSeconds: 1.5 }, { graceSeconds: 604_801 }, { grace: 1 }, []]) {
      const res = await call(control.app, 'POST', '/v1/admin/signing-keys/rotate', admin, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    }
    expect((await call(control.app, 'POST', '/v1/admin/signing-keys/rotate', undefined, {})).statusCode).toBe(401);
    await call(control.app, 'POST', '/v1/users', admin, { id: 'pat' });
    const issued = (await call(control.app, 'POST', '/v1/users/pat/tokens', admin, {})).json();
    const pat = await exchange(issued.token);
    const res = await call(control.app, 'POST', '/v1/admin/signing-keys/rotate', pat, {});
    expect(res.statusCode).toBe(403);
    expect((await call(control.app, 'GET', '/v1/admin/signing-keys', pat)).statusCode).toBe(403);
  });

  it('accepts the retired key’s tokens for the grace period, then refuses them in every service', async () => {
    const old = await exchange(BOOTSTRAP);
    const oldKid = kidOf(old);
    const res = await call(control.app, 'POST', '/v1/admin/signing-keys/rotate', admin, {
      graceSeconds: GRACE_SECONDS,
    });
    expect(res.statusCode, res.body).toBe(201);
    const rotation = res.json();
    expect(rotation.retiredKid).toBe(oldKid);
    expect(rotation.kid).not.toBe(oldKid);
    const refusedAfter = Date.parse(rotation.refusedAfter);
    const signsFrom = Date.parse(rotation.signsFrom);
    // The new key is announced first: the old one signs until signsFrom, and is refused its grace after.
    expect(signsFrom - Date.now()).toBeGreaterThan(ANNOUNCE_MS - 1000);
    expect(refusedAfter - signsFrom).toBe(GRACE_SECONDS * 1000);
    const announced = await exchange(BOOTSTRAP);
    if (Date.now() < signsFrom - 200) expect(kidOf(announced)).toBe(oldKid);

    // From signsFrom new tokens are signed by the new key, which every service already knows.
    const fresh = await eventually(
      'the new key signing',
      async () => {
        const token = await exchange(BOOTSTRAP);
        return kidOf(token) === rotation.kid ? token : undefined;
      },
      { timeoutMs: ANNOUNCE_MS + 5000, intervalMs: 100 },
    );
    expect(Date.now()).toBeGreaterThanOrEqual(signsFrom);
    expect(await statuses(fresh)).toEqual([200, 200, 200]);
    // Within the grace period the old key's token still works everywhere.
    expect(Date.now()).toBeLessThan(refusedAfter);
    expect(await statuses(old)).toEqual([200, 200, 200]);

    const keys = (await call(control.app, 'GET', '/v1/admin/signing-keys', admin)).json().keys;
    expect(keys.map((k: { kid: string }) => k.kid)).toEqual([rotation.kid, oldKid]);
    expect(keys[1].retiredAt).toEqual(expect.any(String));
    expect(Math.floor(Date.parse(keys[1].refusedAfter))).toBe(refusedAfter);

    await everywhere(old, 401, 'the retired key refused everywhere');
    expect(Date.now()).toBeGreaterThanOrEqual(refusedAfter);
    for (const r of replicas) {
      const refused = await call(r.app, 'GET', '/v1/probe/admin', old);
      expect(refused.json(), r.name).toMatchObject({ detail: 'the access token is signed by a retired key' });
    }
    expect((await call(control.app, 'GET', '/v1/users/admin', old)).json().detail).toBe(
      'the access token is signed by a retired key',
    );
    expect(await statuses(fresh)).toEqual([200, 200, 200]);
  });

  it('refuses nothing while requests run during rotations: each key is announced before it signs', async () => {
    // Issue 32: control signed with a new key before the replicas had it, and they answered 503
    // ("not known here yet") to fresh tokens. Each loop exchanges a token and sends it at once to
    // data and intelligence: the worst case, a token signed a moment after the switch.
    const answers = new Map<string, number>();
    const kids = new Set<string>();
    let running = true;
    const loop = async () => {
      while (running) {
        const token = await exchange(BOOTSTRAP);
        kids.add(kidOf(token));
        for (const r of replicas) {
          const res = await call(r.app, 'GET', '/v1/probe/admin', token);
          const answer = res.statusCode === 200 ? '200' : `${res.statusCode} ${res.json().detail}`;
          answers.set(answer, (answers.get(answer) ?? 0) + 1);
        }
      }
    };
    const loops = [loop(), loop()];
    try {
      for (let i = 0; i < 3; i++) {
        admin = await exchange(BOOTSTRAP);
        const res = await call(control.app, 'POST', '/v1/admin/signing-keys/rotate', admin, { graceSeconds: 60 });
        expect(res.statusCode, res.body).toBe(201);
        const { kid } = res.json();
        await eventually('the rotated key signing', async () => (kids.has(kid) ? true : undefined), {
          timeoutMs: ANNOUNCE_MS + 10_000,
          intervalMs: 50,
        });
        await new Promise((r) => setTimeout(r, 300));
      }
    } finally {
      running = false;
      await Promise.all(loops);
    }
    console.info(`requests during three rotations: ${JSON.stringify(Object.fromEntries(answers))}`);
    expect(kids.size).toBeGreaterThanOrEqual(4);
    expect(answers.get('200')).toBeGreaterThan(20);
    expect([...answers.keys()]).toEqual(['200']);
    // A retired key keeps its private half only until its successor signs.
    const { rows } = await control.app.pg.query<{ kid: string; private: boolean }>(
      'SELECT kid, private_key_sealed IS NOT NULL AS private FROM signing_keys ORDER BY signs_from DESC',
    );
    expect(rows.map((r) => r.private)).toEqual([true, ...rows.slice(1).map(() => false)]);
  }, 60_000);

  it('refuses a leaked key’s tokens at once with a grace of 0', async () => {
    const leaked = await exchange(BOOTSTRAP);
    await everywhere(leaked, 200, 'the active key accepted everywhere');
    // Rotated with the leaked key's own token: it is the one token of the admin here.
    const res = await call(control.app, 'POST', '/v1/admin/signing-keys/rotate', leaked, { graceSeconds: 0 });
    expect(res.statusCode).toBe(201);
    const started = Date.now();
    admin = await exchange(BOOTSTRAP);
    await everywhere(leaked, 401, 'the leaked key refused everywhere');
    console.info(`a key retired with no grace was refused everywhere after ${Date.now() - started} ms`);
    await everywhere(admin, 200, 'the new key accepted everywhere');
  });
});

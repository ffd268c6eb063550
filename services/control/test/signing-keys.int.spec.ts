import { randomBytes } from 'node:crypto';
import { fastifyOptions, generateSigningKey, loadConfig } from '@onto/shared';
import {
  createTestDatabase,
  createTestTopics,
  eventually,
  testEndpoints,
  testIdentityEnv,
  testKeyEncryptionKey,
} from '@onto/shared/testing';
import Fastify, { type FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import control, { migrations } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import { openPrivateKey, parseKeyEncryptionKey } from '../src/identity/key-encryption.js';

const BOOTSTRAP = 'signing-keys-bootstrap-token-0123456789';

/**
 * The signing keys at rest and by age (ADR 42): sealed with the key-encryption key, plaintext rows
 * of an earlier version sealed at boot, boot refused without the right KEK, rotation once a key is
 * old. Control is booted several times on one database, as a restart would.
 */
describe('control signing keys', () => {
  let databaseUrl: string;
  let dropDatabase: () => Promise<void>;
  let dropTopics: () => Promise<void>;
  let prefix: string;
  let db: pg.Client;

  function environment(overrides: Record<string, string | undefined> = {}) {
    const endpoints = testEndpoints();
    const env: Record<string, string | undefined> = {
      DATABASE_URL: databaseUrl,
      REDIS_URL: endpoints.redisUrl,
      KAFKA_BROKERS: endpoints.kafkaBrokers,
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
      ONTO_TOPIC_PREFIX: prefix,
      ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
      // Other spec files exchange the same bootstrap token at the same time, and the per-token
      // budget is shared through Redis: these tests exchange often and are not about the limit.
      TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN: '100000',
      TOKEN_EXCHANGES_PER_MINUTE_PER_IP: '100000',
      ...testIdentityEnv(),
      ...overrides,
    };
    return Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined)) as Record<string, string>;
  }
  async function boot(overrides: Record<string, string | undefined> = {}): Promise<FastifyInstance> {
    const config = loadConfig(ConfigSchema, environment(overrides));
    const app = Fastify(fastifyOptions(config));
    try {
      await app.register(control, { config });
      await app.ready();
    } catch (error) {
      await app.close().catch(() => {});
      throw error;
    }
    return app;
  }
  async function withControl<T>(run: (app: FastifyInstance) => Promise<T>, overrides = {}): Promise<T> {
    const app = await boot(overrides);
    try {
      return await run(app);
    } finally {
      await app.close();
    }
  }
  const exchange = async (app: FastifyInstance) => {
    const res = await app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken: BOOTSTRAP } });
    expect(res.statusCode, res.body).toBe(200);
    const token = res.json().accessToken as string;
    return { token, kid: JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString()).kid as string };
  };

  beforeAll(async () => {
    const created = await createTestDatabase(testEndpoints().postgresUrl, migrations);
    databaseUrl = created.url;
    dropDatabase = created.drop;
    const topics = await createTestTopics(testEndpoints().kafkaBrokers, 1);
    prefix = topics.prefix;
    dropTopics = topics.drop;
    db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await dropDatabase?.();
    await dropTopics?.();
  });

  it('stores the private key sealed: no part of it in the row', async () => {
    const { kid } = await withControl(exchange);
    const { rows } = await db.query(
      'SELECT kid, private_jwk, private_key_sealed, signing_keys::text AS row FROM signing_keys',
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].kid).toBe(kid);
    expect(rows[0].private_jwk).toBeNull();
    const jwk = openPrivateKey(parseKeyEncryptionKey(testKeyEncryptionKey()), kid, rows[0].private_key_sealed);
    const d = String(jwk.d);
    expect(d.length).toBeGreaterThan(40);
    for (const form of [
      d,
      Buffer.from(d, 'base64url').toString('hex'),
      Buffer.from(d, 'base64url').toString('base64'),
    ]) {
      expect(rows[0].row).not.toContain(form);
      expect(rows[0].private_key_sealed.includes(Buffer.from(form))).toBe(false);
    }
    expect(rows[0].private_key_sealed.includes(Buffer.from(d, 'base64url'))).toBe(false);
    expect(rows[0].private_key_sealed.includes(Buffer.from('"kty"'))).toBe(false);
  });

  it('refuses to boot without the key-encryption key, with a malformed one, or with another one', async () => {
    expect(() => loadConfig(ConfigSchema, environment({ ONTO_KEY_ENCRYPTION_KEY: undefined }))).toThrow(
      /ONTO_KEY_ENCRYPTION_KEY/,
    );
    await expect(boot({ ONTO_KEY_ENCRYPTION_KEY: 'too-short' })).rejects.toThrow(/32 random bytes/);
    await expect(boot({ ONTO_KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64') })).rejects.toThrow(
      /ONTO_KEY_ENCRYPTION_KEY does not open the signing key/,
    );
    expect(() => loadConfig(ConfigSchema, environment({ ONTO_IDENTITY_PRIVATE_KEY: undefined }))).toThrow(
      /ONTO_IDENTITY_PRIVATE_KEY/,
    );
    // The right one still boots, and the key is unchanged.
    const before = await db.query('SELECT kid FROM signing_keys');
    await withControl(exchange);
    expect((await db.query('SELECT kid FROM signing_keys')).rows).toEqual(before.rows);
  });

  it('seals a private key an earlier version stored in the clear, at boot, and signs with it', async () => {
    const plain = await generateSigningKey();
    await db.query(
      `UPDATE signing_keys SET retired_at = now(), refused_after = now(), private_key_sealed = NULL WHERE retired_at IS NULL`,
    );
    await db.query('INSERT INTO signing_keys (kid, private_jwk, public_jwk) VALUES ($1, $2, $3)', [
      plain.kid,
      plain.privateJwk,
      plain.publicJwk,
    ]);
    const { kid, token } = await withControl(async (app) => {
      const signed = await exchange(app);
      const res = await app.inject({ url: '/v1/users/admin', headers: { authorization: `Bearer ${signed.token}` } });
      expect(res.statusCode).toBe(200);
      return signed;
    });
    expect(kid).toBe(plain.kid);
    expect(token).toBeTruthy();
    const { rows } = await db.query('SELECT private_jwk, private_key_sealed FROM signing_keys WHERE kid = $1', [kid]);
    expect(rows[0].private_jwk).toBeNull();
    expect(openPrivateKey(parseKeyEncryptionKey(testKeyEncryptionKey()), kid, rows[0].private_key_sealed)).toEqual(
      plain.privateJwk,
    );
    // A retired key keeps no private half.
    const retired = await db.query(
      'SELECT count(*)::int AS n FROM signing_keys WHERE retired_at IS NOT NULL AND (private_jwk IS NOT NULL OR private_key_sealed IS NOT NULL)',
    );
    expect(retired.rows[0].n).toBe(0);
  });

  it('rotates a key once it reaches its age, once per age across two replicas', async () => {
    const count = async () => (await db.query('SELECT count(*)::int AS n FROM signing_keys')).rows[0].n as number;
    const createdAt = async (kid: string) =>
      (await db.query('SELECT created_at FROM signing_keys WHERE kid = $1', [kid])).rows[0].created_at as Date;
    const ageing = {
      SIGNING_KEY_MAX_AGE_SECONDS: '2',
      SIGNING_KEY_CHECK_INTERVAL_MS: '100',
      SIGNING_KEY_ANNOUNCE_MS: '500',
    };
    const other = await boot(ageing);
    await withControl(async (app) => {
      try {
        const first = await exchange(app);
        const nextAfter = (kid: string) =>
          eventually(
            `a rotation of ${kid} by age`,
            async () => {
              const current = await exchange(app);
              return current.kid !== kid ? current : undefined;
            },
            { timeoutMs: 10_000, intervalMs: 200 },
          );
        const second = await nextAfter(first.kid);
        const n = await count();
        // Its successor is young: not rotated again within its age, whatever the check interval.
        await new Promise((r) => setTimeout(r, 1000));
        expect(await count()).toBe(n);
        const third = await nextAfter(second.kid);
        expect(await count()).toBe(n + 1);
        const age = (await createdAt(third.kid)).getTime() - (await createdAt(second.kid)).getTime();
        expect(age).toBeGreaterThanOrEqual(2000);
        // The retired keys' tokens still verify during the grace period (default: the token TTL).
        const res = await app.inject({ url: '/v1/users/admin', headers: { authorization: `Bearer ${first.token}` } });
        expect(res.statusCode).toBe(200);
      } finally {
        await other.close();
      }
    }, ageing);
  });
  it('rotates the key-encryption key: the keys sealed again under the new one at boot, the same keys signing', async () => {
    // Many exchanges in a minute here: the limit of one token's exchanges is not what is tested.
    const rate = { TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN: '100000', TOKEN_EXCHANGES_PER_MINUTE_PER_IP: '100000' };
    const oldKek = testKeyEncryptionKey();
    const newKek = randomBytes(32).toString('base64');
    const sealedRows = async () =>
      (
        await db.query<{ kid: string; private_key_sealed: Buffer }>(
          'SELECT kid, private_key_sealed FROM signing_keys WHERE private_key_sealed IS NOT NULL ORDER BY kid',
        )
      ).rows;
    const before = await sealedRows();
    expect(before.length).toBeGreaterThan(0);
    const { kid: signing } = await withControl(exchange, rate);

    // The new key alone opens nothing yet; a malformed previous one is named.
    await expect(boot({ ONTO_KEY_ENCRYPTION_KEY: newKek })).rejects.toThrow(/ONTO_KEY_ENCRYPTION_KEY does not open/);
    await expect(boot({ ONTO_KEY_ENCRYPTION_KEY: newKek, ONTO_KEY_ENCRYPTION_KEY_PREVIOUS: 'short' })).rejects.toThrow(
      /ONTO_KEY_ENCRYPTION_KEY_PREVIOUS must be 32 random bytes/,
    );
    // Neither of two wrong keys: refused, naming both.
    await expect(
      boot({
        ONTO_KEY_ENCRYPTION_KEY: newKek,
        ONTO_KEY_ENCRYPTION_KEY_PREVIOUS: randomBytes(32).toString('base64'),
      }),
    ).rejects.toThrow(/neither ONTO_KEY_ENCRYPTION_KEY nor ONTO_KEY_ENCRYPTION_KEY_PREVIOUS/);
    expect(await sealedRows()).toEqual(before); // nothing touched by the refused boots

    // New and previous: every key sealed again under the new one, and the same key signs.
    expect(
      (
        await withControl(exchange, {
          ...rate,
          ONTO_KEY_ENCRYPTION_KEY: newKek,
          ONTO_KEY_ENCRYPTION_KEY_PREVIOUS: oldKek,
        })
      ).kid,
    ).toBe(signing);
    const after = await sealedRows();
    expect(after.map((r) => r.kid)).toEqual(before.map((r) => r.kid));
    for (const [i, row] of after.entries()) {
      expect(row.private_key_sealed.equals(before[i]?.private_key_sealed as Buffer)).toBe(false);
      expect(openPrivateKey(parseKeyEncryptionKey(newKek), row.kid, row.private_key_sealed).kty).toBe('OKP');
      expect(() => openPrivateKey(parseKeyEncryptionKey(oldKek), row.kid, row.private_key_sealed)).toThrow();
    }
    // The previous key can go; the old one alone no longer boots.
    expect((await withControl(exchange, { ...rate, ONTO_KEY_ENCRYPTION_KEY: newKek })).kid).toBe(signing);
    await expect(boot()).rejects.toThrow(/ONTO_KEY_ENCRYPTION_KEY does not open/);

    // And back, as the other tests here use the test KEK.
    await withControl(exchange, { ...rate, ONTO_KEY_ENCRYPTION_KEY: oldKek, ONTO_KEY_ENCRYPTION_KEY_PREVIOUS: newKek });
    expect((await withControl(exchange, rate)).kid).toBe(signing);
  });
});

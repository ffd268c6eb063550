import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSigningKey, importSigningKey, importVerificationKey, signAccessToken } from '../src/auth/tokens.js';
import { installProblemHandlers, Unavailable } from '../src/errors/problem.js';
import { validatorCompiler } from '../src/http/validation.js';
import { type AccessTokenClaims, authPlugin, type Principal, type RevocationView, refusal } from '../src/index.js';

// The verification plugin on its own: keys and revocations are in memory, so this needs no stack.
describe('auth plugin', () => {
  let app: FastifyInstance;
  let mint: (grant: Partial<Parameters<typeof signAccessToken>[1]>) => Promise<string>;
  let otherKeyToken: string;
  let publicX: string;
  const revoked = new Set<string>();
  let stale = false;

  const view: RevocationView = {
    async principal(claims: AccessTokenClaims): Promise<Principal | null> {
      if (stale) throw new Unavailable('the replica lags', 2);
      if (revoked.has(claims.jti)) return null;
      return {
        userId: claims.sub,
        tokenId: claims.jti,
        apiTokenId: claims.ati,
        admin: claims.adm,
        roles: claims.roles,
      };
    },
  };

  beforeAll(async () => {
    const signing = await generateSigningKey();
    const other = await generateSigningKey();
    publicX = signing.publicJwk.x;
    const key = { kid: signing.kid, privateKey: await importSigningKey(signing.privateJwk) };
    const verification = await importVerificationKey(signing.publicJwk);
    mint = async (grant) =>
      (
        await signAccessToken(key, {
          userId: 'ann',
          apiTokenId: '00000000-0000-4000-8000-000000000001',
          generation: 0,
          admin: false,
          roles: {},
          ttlSeconds: 60,
          ...grant,
        })
      ).token;
    otherKeyToken = (
      await signAccessToken(
        { kid: other.kid, privateKey: await importSigningKey(other.privateJwk) },
        { userId: 'ann', apiTokenId: 'x', generation: 0, admin: true, roles: {}, ttlSeconds: 60 },
      )
    ).token;

    app = Fastify();
    app.setValidatorCompiler(validatorCompiler);
    installProblemHandlers(app);
    await app.register(authPlugin, {
      keys: { key: async (kid) => (kid === signing.kid ? verification : undefined) },
      revocations: view,
    });
    app.get('/v1/worlds/:world/read', { preHandler: app.authorize({ role: 'viewer' }) }, async (r) => r.principal);
    app.put('/v1/worlds/:world/write', { preHandler: app.authorize({ role: 'editor' }) }, async () => ({ ok: 1 }));
    app.delete('/v1/worlds/:world/own', { preHandler: app.authorize({ role: 'owner' }) }, async () => ({ ok: 1 }));
    app.get('/v1/platform', { preHandler: app.authorize({ admin: true }) }, async () => ({ ok: 1 }));
    app.get('/v1/me', { preHandler: app.authorize({ authenticated: true }) }, async (r) => r.principal);
    app.post('/v1/open', { config: { public: true } }, async () => ({ open: true }));
    await app.ready();
  });
  afterAll(async () => {
    await app?.close();
  });

  const call = (method: 'GET' | 'PUT' | 'DELETE', url: string, token?: string) =>
    app.inject({ method, url, headers: token ? { authorization: `Bearer ${token}` } : {} });

  it('refuses a request without a token with 401, WWW-Authenticate and problem+json', async () => {
    const res = await call('GET', '/v1/me');
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer');
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({
      status: 401,
      title: 'Unauthorized',
      detail: 'a bearer access token is required',
    });
    const basic = await app.inject({ url: '/v1/me', headers: { authorization: 'Basic YWRtaW46YWRtaW4=' } });
    expect(basic.statusCode).toBe(401);
    expect((await call('GET', '/v1/me', 'not-a-jwt')).statusCode).toBe(401);
  });

  it('passes a valid token and exposes its principal', async () => {
    const token = await mint({ roles: { alpha: 'viewer' } });
    const res = await call('GET', '/v1/me', token);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ userId: 'ann', admin: false, roles: { alpha: 'viewer' } });
  });

  it('applies the role order viewer < editor < owner, per world', async () => {
    const matrix = [
      { roles: { alpha: 'viewer' }, expect: [200, 403, 403] },
      { roles: { alpha: 'editor' }, expect: [200, 200, 403] },
      { roles: { alpha: 'owner' }, expect: [200, 200, 200] },
      { roles: { beta: 'owner' }, expect: [403, 403, 403] },
      { roles: {}, admin: true, expect: [200, 200, 200] },
    ] as const;
    for (const row of matrix) {
      const token = await mint({ roles: row.roles, admin: 'admin' in row });
      const got = [
        (await call('GET', '/v1/worlds/alpha/read', token)).statusCode,
        (await call('PUT', '/v1/worlds/alpha/write', token)).statusCode,
        (await call('DELETE', '/v1/worlds/alpha/own', token)).statusCode,
      ];
      expect(got, JSON.stringify(row)).toEqual(row.expect);
    }
    const viewer = await mint({ roles: { alpha: 'viewer' } });
    const refused = await call('PUT', '/v1/worlds/alpha/write', viewer);
    expect(refused.json()).toMatchObject({ status: 403, detail: expect.stringContaining('editor') });
    const elsewhere = await call('GET', '/v1/worlds/beta/read', viewer);
    expect(elsewhere.json()).toMatchObject({ status: 403, detail: 'you hold no role in world beta' });
  });

  it('keeps platform routes to administrators', async () => {
    expect((await call('GET', '/v1/platform', await mint({ roles: { alpha: 'owner' } }))).statusCode).toBe(403);
    expect((await call('GET', '/v1/platform', await mint({ admin: true }))).statusCode).toBe(200);
  });

  it('refuses an expired token', async () => {
    const token = await mint({ issuedAt: Math.floor(Date.now() / 1000) - 120, ttlSeconds: 60 });
    const res = await call('GET', '/v1/me', token);
    expect(res.statusCode).toBe(401);
    expect(res.json().detail).toBe('the access token has expired');
  });

  it('refuses a tampered payload and a tampered signature', async () => {
    const token = await mint({ roles: { alpha: 'viewer' } });
    const [header, payload, signature] = token.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    const forged = Buffer.from(JSON.stringify({ ...claims, roles: { alpha: 'owner' } })).toString('base64url');
    expect((await call('DELETE', '/v1/worlds/alpha/own', `${header}.${forged}.${signature}`)).statusCode).toBe(401);
    const flipped = `${signature.slice(0, -4)}${signature.slice(-4) === 'AAAA' ? 'BBBB' : 'AAAA'}`;
    const res = await call('GET', '/v1/me', `${header}.${payload}.${flipped}`);
    expect(res.statusCode).toBe(401);
    expect(res.json().detail).toBe('the access token is invalid');
  });

  it('refuses alg none, HMAC signed with the public key, and keys it does not know', async () => {
    const token = await mint({ admin: true });
    const [header, payload] = token.split('.') as [string, string];
    const head = JSON.parse(Buffer.from(header, 'base64url').toString());
    const encode = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const none = `${encode({ ...head, alg: 'none' })}.${payload}.`;
    expect((await call('GET', '/v1/me', none)).json()).toMatchObject({ status: 401, detail: /EdDSA/ });

    const { createHmac } = await import('node:crypto');
    const hsHeader = encode({ ...head, alg: 'HS256' });
    const mac = createHmac('sha256', Buffer.from(publicX, 'base64url'))
      .update(`${hsHeader}.${payload}`)
      .digest('base64url');
    expect((await call('GET', '/v1/me', `${hsHeader}.${payload}.${mac}`)).statusCode).toBe(401);

    const unknown = await call('GET', '/v1/me', otherKeyToken);
    expect(unknown.json()).toMatchObject({ status: 401, detail: 'the access token is signed by an unknown key' });
  });

  it('refuses a revoked token with 401 and answers 503 with Retry-After when the view is stale', async () => {
    const token = await mint({ admin: true });
    const jti = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()).jti;
    revoked.add(jti);
    const res = await call('GET', '/v1/me', token);
    expect(res.json()).toMatchObject({ status: 401, detail: 'the access token has been revoked' });

    stale = true;
    try {
      const unavailable = await call('GET', '/v1/me', await mint({ admin: true }));
      expect(unavailable.statusCode).toBe(503);
      expect(unavailable.headers['retry-after']).toBe('2');
      // A token that is not valid at all is still a 401, stale or not.
      expect((await call('GET', '/v1/me', 'x.y.z')).statusCode).toBe(401);
    } finally {
      stale = false;
    }
  });

  it('lets anonymous callers use routes that say they are public', async () => {
    expect((await app.inject({ method: 'POST', url: '/v1/open' })).json()).toEqual({ open: true });
  });

  it('refuses to register a /v1 route without authorize, or a world role without :world', async () => {
    const bare = Fastify();
    await bare.register(authPlugin, { keys: { key: async () => undefined }, revocations: view });
    expect(() => bare.get('/v1/things', async () => ({}))).toThrow(/no fastify.authorize/);
    expect(() => bare.get('/v1/things', { preHandler: bare.authorize({ role: 'viewer' }) }, async () => ({}))).toThrow(
      /no :world parameter/,
    );
    expect(() => bare.authorize({ role: 'boss' } as never)).toThrow(TypeError);
    await bare.close();
  });

  it('decides refusals as a pure function', () => {
    const p: Principal = { userId: 'u', tokenId: 't', apiTokenId: 'a', admin: false, roles: { w: 'editor' } };
    expect(refusal(p, { role: 'editor' }, 'w')).toBeNull();
    expect(refusal(p, { role: 'owner' }, 'w')).toMatch(/owner/);
    expect(refusal(p, { role: 'viewer' }, 'v')).toMatch(/no role/);
    // A world named like a prototype member is one the principal holds no role in.
    for (const world of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      expect(refusal(p, { role: 'viewer' }, world)).toBe(`you hold no role in world ${world}`);
    }
    expect(refusal(p, { admin: true })).toMatch(/administrator/);
    expect(refusal({ ...p, admin: true }, { role: 'owner' }, 'v')).toBeNull();
    expect(refusal(p, { authenticated: true })).toBeNull();
  });
});

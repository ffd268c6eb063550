import { randomUUID, timingSafeEqual } from 'node:crypto';
import rateLimit from '@fastify/rate-limit';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BODY_LIMITS,
  Conflict,
  Forbidden,
  HttpProblem,
  identityMessage,
  NotFound,
  Outbox,
  principalOf,
  problemResponses,
  recordAudit,
  signAccessToken,
  Unauthorized,
  WORLD_ID,
  WORLD_ROLES,
  type WorldRole,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { lockWorld } from '../worlds/repository.js';
import type { SigningKeys } from './keys.js';
import {
  ensureBootstrapAdmin,
  findUser,
  hashApiToken,
  insertAccessTokenRevocation,
  insertApiToken,
  insertUser,
  listApiTokens,
  markApiTokenRevoked,
  redeemApiToken,
  transaction,
} from './repository.js';
import { grantRole, revokeRole } from './roles.js';

export interface IdentityRoutesOptions {
  /** The active key is read per exchange: a rotation by any replica takes effect at once. */
  signingKeys: SigningKeys;
  accessTokenTtlSeconds: number;
  bootstrapToken?: string | undefined;
  /** Token exchanges allowed per minute, per client address and per API token presented. */
  exchangesPerMinute: { perIp: number; perToken: number };
  /** Where the counts live in Redis. */
  rateLimitNamespace: string;
}

/** A 429 that says when to come back; Retry-After is set with it. */
class TooManyRequests extends HttpProblem {
  constructor(detail: string) {
    super(429, 'too-many-requests', 'Too Many Requests', detail);
  }
}

const USER_ID = '^[a-z][a-z0-9._-]{0,62}$';
const UserId = Type.String({
  pattern: USER_ID,
  description: 'lower-case letters, digits, ".", "_" and "-", starting with a letter',
});
const Role = Type.Union(
  WORLD_ROLES.map((r) => Type.Literal(r)),
  { description: 'viewer < editor < owner' },
);
const World = Type.String({ pattern: WORLD_ID });

const User = Type.Object({
  id: Type.String(),
  displayName: Type.Union([Type.String(), Type.Null()]),
  admin: Type.Boolean(),
  roles: Type.Record(Type.String(), Role),
  createdAt: Type.String({ format: 'date-time' }),
});
const ApiToken = Type.Object({
  id: Type.String({ format: 'uuid' }),
  name: Type.Union([Type.String(), Type.Null()]),
  createdAt: Type.String({ format: 'date-time' }),
  revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});
const Membership = Type.Object({ world: Type.String(), userId: Type.String(), role: Role, changed: Type.Boolean() });

/** Free text PostgreSQL can store: it keeps no NUL character in text (a token name with one was a 500). */
const STORABLE_TEXT = '^[^\\u0000]*$';
const UserParams = Type.Object({ userId: UserId });
const TokenParams = Type.Object({ userId: UserId, tokenId: Type.String({ format: 'uuid' }) });
const MemberParams = Type.Object({ world: World, userId: UserId });

/** Users, API tokens, the exchange for access tokens, and members of worlds. */
export default async function identityRoutes(fastify: FastifyInstance, opts: IdentityRoutesOptions) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const bootstrapHash = opts.bootstrapToken ? hashApiToken(opts.bootstrapToken) : undefined;
  const pool = app.pg;

  // Token exchanges are counted in Redis, so the limits hold across control's replicas; when Redis
  // is down the exchange is not limited rather than refused (skipOnError).
  await app.register(rateLimit, {
    global: false,
    redis: app.redis,
    nameSpace: opts.rateLimitNamespace,
    skipOnError: true,
  });
  const limiter = (what: string, max: number, keyOf: (request: FastifyRequest) => string) => {
    const limit = app.createRateLimit({ max, timeWindow: 60_000, keyGenerator: keyOf });
    return async (request: FastifyRequest, reply: FastifyReply) => {
      const state = await limit(request);
      if (state.isAllowed || !state.isExceeded) return;
      reply.header('retry-after', state.ttlInSeconds);
      throw new TooManyRequests(`at most ${max} token exchanges a minute ${what}; retry in ${state.ttlInSeconds} s`);
    };
  };
  // Per client address before the body is read; per API token once it is (by its hash: the
  // token's id is known only after the lookup the limit protects).
  const perIp = limiter('from one address', opts.exchangesPerMinute.perIp, (request) => `ip:${request.ip}`);
  const perToken = limiter(
    'with one API token',
    opts.exchangesPerMinute.perToken,
    (request) => `token:${hashApiToken((request.body as { apiToken: string }).apiToken).toString('hex')}`,
  );

  /** Users manage their own tokens; administrators anyone's. Refused before existence is told. */
  const selfOrAdmin = (request: FastifyRequest, userId: string) => {
    const principal = principalOf(request);
    if (!principal.admin && principal.userId !== userId) {
      throw new Forbidden("only the user or a platform administrator may see or change this user's tokens");
    }
  };

  app.post(
    '/v1/auth/token',
    {
      bodyLimit: BODY_LIMITS.small,
      config: { public: true },
      onRequest: perIp,
      preHandler: perToken,
      schema: {
        tags: ['identity'],
        summary: 'Exchange an API token (or ONTO_BOOTSTRAP_TOKEN) for a short-lived access token',
        body: Type.Object({ apiToken: Type.String({ minLength: 1, maxLength: 512 }) }, { additionalProperties: false }),
        response: {
          200: Type.Object({
            accessToken: Type.String(),
            tokenType: Type.Literal('Bearer'),
            expiresIn: Type.Integer({ description: 'seconds' }),
            expiresAt: Type.String({ format: 'date-time' }),
          }),
          ...problemResponses(400, 401, 429),
        },
      },
    },
    async (request) => {
      const hash = hashApiToken(request.body.apiToken);
      // The access token's id is chosen first, so that the exchange's audit record names it.
      const tokenId = randomUUID();
      const redeemed = await transaction(pool, async (tx) => {
        const bootstrap =
          bootstrapHash !== undefined && timingSafeEqual(hash, bootstrapHash) && (await ensureBootstrapAdmin(tx, hash));
        const found = await redeemApiToken(tx, hash);
        if (found) {
          await recordAudit(tx, request, {
            action: 'identity.token.exchange',
            result: 'created',
            subject: found.apiTokenId,
            actor: found.userId,
            tokenId,
            detail: bootstrap ? { bootstrap: true } : {},
          });
        }
        return found;
      });
      if (!redeemed) throw new Unauthorized('the API token is unknown or revoked');
      const signed = await signAccessToken(await opts.signingKeys.active(), {
        ...redeemed,
        tokenId,
        ttlSeconds: opts.accessTokenTtlSeconds,
      });
      return {
        accessToken: signed.token,
        tokenType: 'Bearer' as const,
        expiresIn: opts.accessTokenTtlSeconds,
        expiresAt: new Date(signed.expiresAt * 1000).toISOString(),
      };
    },
  );

  app.delete(
    '/v1/auth/token',
    {
      preHandler: app.authorize({ authenticated: true }),
      schema: {
        tags: ['identity'],
        summary: 'Revoke the access token this request presents (sign out)',
        response: { 204: Type.Null(), ...problemResponses(401, 503) },
      },
    },
    async (request, reply) => {
      const principal = principalOf(request);
      const expiresAt = new Date(Date.now() + opts.accessTokenTtlSeconds * 1000);
      await transaction(pool, async (tx) => {
        const fresh = await insertAccessTokenRevocation(tx, {
          userId: principal.userId,
          tokenId: principal.tokenId,
          expiresAt,
          requestId: request.id,
        });
        if (!fresh) return;
        await new Outbox(tx, app.topicPrefix).add(
          identityMessage(
            'identity.token.revoked',
            principal.userId,
            { userId: principal.userId, accessTokenId: principal.tokenId, expiresAt: expiresAt.getTime() },
            { requestId: request.id },
          ),
        );
        await recordAudit(tx, request, {
          action: 'identity.access-token.revoke',
          result: 'deleted',
          subject: principal.tokenId,
        });
      });
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/v1/users',
    {
      bodyLimit: BODY_LIMITS.small,
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['identity'],
        summary: 'Create a user (platform administrators only)',
        body: Type.Object(
          {
            id: UserId,
            displayName: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: STORABLE_TEXT })),
            admin: Type.Optional(Type.Boolean({ description: 'make the user a platform administrator' })),
          },
          { additionalProperties: false },
        ),
        response: { 201: User, ...problemResponses(400, 401, 403, 409, 503) },
      },
    },
    async (request, reply) => {
      const { id, displayName, admin = false } = request.body;
      const user = await transaction(pool, async (tx) => {
        const created = await insertUser(tx, { id, displayName, admin, createdBy: principalOf(request).userId });
        if (!created) throw new Conflict(`user ${id} exists`);
        await recordAudit(tx, request, {
          action: 'identity.user.create',
          result: 'created',
          subject: id,
          detail: { admin },
        });
        const user = await findUser(tx, id);
        if (!user) throw new Error(`user ${id} vanished in its own transaction`);
        return user;
      });
      return reply.code(201).send(user);
    },
  );

  app.get(
    '/v1/users/:userId',
    {
      preHandler: app.authorize({ authenticated: true }),
      schema: {
        tags: ['identity'],
        summary: 'A user, with its platform and world roles (the user or an administrator)',
        params: UserParams,
        response: { 200: User, ...problemResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { userId } = request.params;
      if (!principalOf(request).admin && principalOf(request).userId !== userId) {
        throw new Forbidden('only the user or a platform administrator may see this user');
      }
      const user = await findUser(pool, userId);
      if (!user) throw new NotFound(`user ${userId} does not exist`);
      return user;
    },
  );

  app.get(
    '/v1/users/:userId/tokens',
    {
      preHandler: app.authorize({ authenticated: true }),
      schema: {
        tags: ['identity'],
        summary: "The user's API tokens, without their secrets",
        params: UserParams,
        response: { 200: Type.Object({ tokens: Type.Array(ApiToken) }), ...problemResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { userId } = request.params;
      selfOrAdmin(request, userId);
      if (!(await findUser(pool, userId))) throw new NotFound(`user ${userId} does not exist`);
      return { tokens: await listApiTokens(pool, userId) };
    },
  );

  app.post(
    '/v1/users/:userId/tokens',
    {
      bodyLimit: BODY_LIMITS.small,
      preHandler: app.authorize({ authenticated: true }),
      schema: {
        tags: ['identity'],
        summary: 'Create an API token; its secret is in this response and nowhere else, ever',
        params: UserParams,
        body: Type.Object(
          { name: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: STORABLE_TEXT })) },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Composite([ApiToken, Type.Object({ token: Type.String() })]),
          ...problemResponses(400, 401, 403, 404, 503),
        },
      },
    },
    async (request, reply) => {
      const { userId } = request.params;
      selfOrAdmin(request, userId);
      const created = await transaction(pool, async (tx) => {
        if (!(await findUser(tx, userId))) throw new NotFound(`user ${userId} does not exist`);
        const token = await insertApiToken(tx, userId, request.body.name);
        await recordAudit(tx, request, {
          action: 'identity.token.create',
          result: 'created',
          subject: token.id,
          detail: { userId },
        });
        return token;
      });
      return reply.code(201).send(created);
    },
  );

  app.delete(
    '/v1/users/:userId/tokens/:tokenId',
    {
      preHandler: app.authorize({ authenticated: true }),
      schema: {
        tags: ['identity'],
        summary: 'Revoke an API token and every access token exchanged from it, everywhere',
        params: TokenParams,
        response: { 204: Type.Null(), ...problemResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request, reply) => {
      const { userId, tokenId } = request.params;
      selfOrAdmin(request, userId);
      await transaction(pool, async (tx) => {
        const outcome = await markApiTokenRevoked(tx, userId, tokenId, {
          revokedBy: principalOf(request).userId,
          requestId: request.id,
        });
        if (outcome === 'missing') throw new NotFound(`user ${userId} has no API token ${tokenId}`);
        if (outcome === 'already') return;
        await new Outbox(tx, app.topicPrefix).add(
          identityMessage('identity.token.revoked', userId, { userId, apiTokenId: tokenId }, { requestId: request.id }),
        );
        await recordAudit(tx, request, {
          action: 'identity.token.revoke',
          result: 'deleted',
          subject: tokenId,
          detail: { userId },
        });
      });
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/v1/worlds/:world/members',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['identity'],
        summary: "The world's members and their roles",
        params: Type.Object({ world: World }),
        response: {
          200: Type.Object({ members: Type.Array(Type.Object({ userId: Type.String(), role: Role })) }),
          ...problemResponses(400, 401, 403, 503),
        },
      },
    },
    async (request) => {
      const { rows } = await pool.query<{ userId: string; role: WorldRole }>(
        'SELECT user_id AS "userId", role FROM world_roles WHERE world_id = $1 ORDER BY user_id',
        [request.params.world],
      );
      return { members: rows };
    },
  );

  app.put(
    '/v1/worlds/:world/members/:userId',
    {
      bodyLimit: BODY_LIMITS.small,
      preHandler: app.authorize({ role: 'owner' }),
      schema: {
        tags: ['identity'],
        summary: "Give a user a role in the world (the world's owners or an administrator)",
        description:
          'A weaker role than the one held revokes the access tokens the user holds (they carry the stronger one).',
        params: MemberParams,
        body: Type.Object({ role: Role }, { additionalProperties: false }),
        response: { 200: Membership, ...problemResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { world, userId } = request.params;
      const { role } = request.body;
      const result = await transaction(pool, async (tx) => {
        // A role in a world that does not exist would be inherited by a world created later under its id.
        await lockWorld(tx, world);
        const change = await grantRole(tx, {
          userId,
          worldId: world,
          role,
          topicPrefix: app.topicPrefix,
          grantedBy: principalOf(request).userId,
          requestId: request.id,
        });
        await recordAudit(tx, request, {
          action: 'identity.member.put',
          result: !change.changed ? 'unchanged' : change.previousRole === null ? 'created' : 'updated',
          worldId: world,
          subject: userId,
          detail: { role, previousRole: change.previousRole },
        });
        return change;
      });
      return { world, userId, role, changed: result.changed };
    },
  );

  app.delete(
    '/v1/worlds/:world/members/:userId',
    {
      preHandler: app.authorize({ role: 'owner' }),
      schema: {
        tags: ['identity'],
        summary: "Take a user's role in the world away; the user's access tokens are revoked",
        params: MemberParams,
        response: { 204: Type.Null(), ...problemResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request, reply) => {
      const { world, userId } = request.params;
      await transaction(pool, async (tx) => {
        const { previousRole } = await revokeRole(tx, {
          userId,
          worldId: world,
          topicPrefix: app.topicPrefix,
          grantedBy: principalOf(request).userId,
          requestId: request.id,
        });
        if (previousRole === null) throw new NotFound(`user ${userId} holds no role in world ${world}`);
        await recordAudit(tx, request, {
          action: 'identity.member.delete',
          result: 'deleted',
          worldId: world,
          subject: userId,
          detail: { previousRole },
        });
      });
      return reply.code(204).send(null);
    },
  );
}

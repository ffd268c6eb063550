import type { FastifyInstance, FastifyRequest, preHandlerAsyncHookHandler, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { Forbidden, Unauthorized } from '../errors/problem.js';
import { kernelAdminRoutes } from '../messaging/plugin.js';
import { type AccessTokenClaims, type KeyRing, verifyAccessToken } from './tokens.js';
import { type Principal, type Requirement, WORLD_ROLES, type WorldRole } from './types.js';

/** What a service knows about revocations, and how fresh that knowledge is. */
export interface RevocationView {
  /**
   * The principal a verified token acts for, or null when the token has been revoked. Throws
   * Unavailable when this view cannot vouch for revocations now (a replica lagging its bound).
   */
  principal(claims: AccessTokenClaims): Promise<Principal | null>;
}

export interface AuthPluginOptions {
  keys: KeyRing;
  revocations: RevocationView;
}

const BEARER = /^Bearer +([A-Za-z0-9_~+/.=-]+) *$/i;
const rank = (role: WorldRole) => WORLD_ROLES.indexOf(role);

/** Why `principal` may not do what `requirement` asks in `worldId`, or null when it may. */
export function refusal(principal: Principal, requirement: Requirement, worldId?: string): string | null {
  if (principal.admin || 'authenticated' in requirement) return null;
  if ('admin' in requirement) return 'this needs a platform administrator';
  if (worldId === undefined) return `this needs the ${requirement.role} role in a world`;
  // A world named like a prototype member (`constructor`) is one the principal holds no role in.
  const held = Object.hasOwn(principal.roles, worldId) ? principal.roles[worldId] : undefined;
  if (held === undefined) return `you hold no role in world ${worldId}`;
  if (rank(held) < rank(requirement.role)) {
    return `this needs the ${requirement.role} role in world ${worldId}; you are ${held}`;
  }
  return null;
}

/** The request's principal; only for handlers behind `authorize`. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Unauthorized();
  return request.principal;
}

/** Who is acting, for authorship, history and events: the principal's user, else 'anonymous'. */
export const actorOf = (request: FastifyRequest): string => request.principal?.userId ?? 'anonymous';

/**
 * Verifies `Authorization: Bearer <access token>` and decorates `authorize(requirement)`, the
 * preHandler every /v1 route carries. Keys and revocations come from the service: control reads
 * its own tables, data and intelligence a replica fed by onto.identity.
 */
export const authPlugin = fp(
  async (app: FastifyInstance, opts: AuthPluginOptions) => {
    app.decorateRequest('principal', null);
    const requirements = new WeakMap<object, Requirement>();

    async function authenticate(request: FastifyRequest): Promise<Principal> {
      if (request.principal) return request.principal;
      const header = request.headers.authorization;
      const token = header ? BEARER.exec(header)?.[1] : undefined;
      if (!token) {
        throw new Unauthorized(
          header ? 'the Authorization header must be "Bearer <access token>"' : 'a bearer access token is required',
        );
      }
      const claims = await verifyAccessToken(token, opts.keys);
      const principal = await opts.revocations.principal(claims);
      if (!principal) throw new Unauthorized('the access token has been revoked');
      request.principal = principal;
      return principal;
    }

    app.decorate('authorize', (requirement: Requirement): preHandlerAsyncHookHandler => {
      if (!isRequirement(requirement)) throw new TypeError(`not a requirement: ${JSON.stringify(requirement)}`);
      const handler: preHandlerAsyncHookHandler = async (request) => {
        const principal = await authenticate(request);
        const world = (request.params as Record<string, unknown> | undefined)?.world;
        const why = refusal(principal, requirement, typeof world === 'string' ? world : undefined);
        if (why) throw new Forbidden(why);
      };
      requirements.set(handler, requirement);
      return handler;
    });

    // "Every /v1 route authenticated and authorised" is checked when a route is registered, so a
    // forgotten preHandler fails at boot rather than opening a route.
    app.addHook('onRoute', (route: RouteOptions) => {
      if (!route.url.startsWith('/v1/') && route.url !== '/v1') return;
      const found = [route.onRequest, route.preValidation, route.preHandler]
        .flat()
        .map((hook) => (hook ? requirements.get(hook) : undefined))
        .filter((r): r is Requirement => r !== undefined);
      if (found.length === 0 && route.config?.public !== true) {
        throw new Error(
          `${route.method} ${route.url} has no fastify.authorize(...) hook: every /v1 route must be authorised (or say config.public)`,
        );
      }
      if (found.some((r) => 'role' in r) && !/(^|\/):world(\/|$)/.test(route.url)) {
        throw new Error(`${route.method} ${route.url} asks for a world role but has no :world parameter`);
      }
      // Authorised before anything else runs, the body's parsing included (issue 19): an
      // unauthenticated request costs no memory, whatever it sends.
      const preHandlers = [route.preHandler ?? []].flat();
      const authorizing = preHandlers.filter((hook) => requirements.has(hook));
      if (authorizing.length > 0) {
        route.preHandler = preHandlers.filter((hook) => !requirements.has(hook));
        route.onRequest = [...[route.onRequest ?? []].flat(), ...authorizing] as typeof route.onRequest;
      }
      if (found.length > 0 && route.schema && !route.schema.hide) {
        route.schema = { ...route.schema, security: [{ bearer: [] }] } as typeof route.schema;
      }
    });
    // The kernel's admin routes, in a service the platform gave a database and Redis.
    if (app.hasDecorator('pg') && app.hasDecorator('redis')) await kernelAdminRoutes(app);
  },
  { name: 'onto-auth' },
);

function isRequirement(value: unknown): value is Requirement {
  if (value === null || typeof value !== 'object') return false;
  const r = value as Record<string, unknown>;
  const keys = Object.keys(r);
  if (keys.length !== 1) return false;
  if ('role' in r) return (WORLD_ROLES as readonly unknown[]).includes(r.role);
  return r.admin === true || r.authenticated === true;
}

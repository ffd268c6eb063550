import type { preHandlerAsyncHookHandler } from 'fastify';

/** Roles a user holds in one world, weakest first. */
export const WORLD_ROLES = ['viewer', 'editor', 'owner'] as const;
export type WorldRole = (typeof WORLD_ROLES)[number];

/** Who a request acts for, from a verified access token. */
export interface Principal {
  userId: string;
  /** The access token's id (`jti`); revocations name it or the API token it came from. */
  tokenId: string;
  /** The API token the access token was exchanged from. */
  apiTokenId: string;
  admin: boolean;
  roles: Record<string, WorldRole>;
}

/**
 * What a route needs: `role` in the world named by the `world` path parameter (a platform
 * administrator passes every check), or `admin`, or only `authenticated`.
 */
export type Requirement = { role: WorldRole } | { admin: true } | { authenticated: true };

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
  }
  interface FastifyInstance {
    /**
     * A preHandler: 401 without a valid token, 403 without the requirement, 503 when the revocation
     * replica lags. Every /v1 route must carry one in its own route options (onRequest, preValidation
     * or preHandler); a /v1 route without one is refused when it is registered, unless its config
     * says `public: true`.
     */
    authorize(requirement: Requirement): preHandlerAsyncHookHandler;
  }
  interface FastifyContextConfig {
    /** A /v1 route that anonymous callers may use (the token exchange); see `authorize`. */
    public?: boolean;
  }
}

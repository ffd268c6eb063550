import { identityReplicaPlugin } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.js';

/**
 * Authentication and authorisation for intelligence's routes: access tokens are verified against the
 * replica of onto.identity this service keeps (keys, revocations, control's heartbeat), failing
 * closed with 503 when it lags control by more than IDENTITY_MAX_LAG_MS.
 */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    await app.register(identityReplicaPlugin, {
      consumer: 'intelligence-identity',
      maxLagMs: config.IDENTITY_MAX_LAG_MS,
      maxClockAheadMs: config.IDENTITY_MAX_CLOCK_AHEAD_MS,
      identityPublicKey: config.ONTO_IDENTITY_PUBLIC_KEY,
      nextIdentityPublicKey: config.ONTO_IDENTITY_PUBLIC_KEY_NEXT,
    });
  },
  { name: 'onto-identity' },
);

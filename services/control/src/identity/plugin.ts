import { authPlugin, parseIdentityPrivateKey } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { bootstrapTokenFault, type Config } from '../config.js';
import { IdentityHeartbeat } from './heartbeat.js';
import { ControlKeyRing, ControlRevocations, ensureSigningKey } from './keys.js';
import identityRoutes from './routes.js';

/**
 * Identity in control: the signing key (created and published at first boot), verification from
 * control's own tables (strongly consistent), the identity routes, and the heartbeat that lets
 * data and intelligence bound how far behind their replica of revocations is.
 */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    // Refused at boot: a guessable bootstrap token is platform administration for anyone.
    const fault =
      config.ONTO_BOOTSTRAP_TOKEN === undefined ? undefined : bootstrapTokenFault(config.ONTO_BOOTSTRAP_TOKEN);
    if (fault) throw new Error(fault);
    const identityKey = config.ONTO_IDENTITY_PRIVATE_KEY
      ? parseIdentityPrivateKey(config.ONTO_IDENTITY_PRIVATE_KEY)
      : undefined;
    if (!identityKey) {
      app.log.warn('ONTO_IDENTITY_PRIVATE_KEY is unset: signing keys and heartbeats on onto.identity go unsigned');
    }
    const signingKey = await ensureSigningKey(app.pg, app.topicPrefix, identityKey);
    await app.register(authPlugin, { keys: new ControlKeyRing(app.pg), revocations: new ControlRevocations(app.pg) });
    await app.register(identityRoutes, {
      signingKey,
      accessTokenTtlSeconds: config.ACCESS_TOKEN_TTL_SECONDS,
      bootstrapToken: config.ONTO_BOOTSTRAP_TOKEN,
      // Shared by the replicas of one deployment (one database), apart from any other's.
      rateLimitNamespace: `onto-control:${app.topicPrefix}${new URL(config.DATABASE_URL).pathname.slice(1)}:token-exchange:`,
      exchangesPerMinute: {
        perIp: config.TOKEN_EXCHANGES_PER_MINUTE_PER_IP,
        perToken: config.TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN,
      },
    });
    const heartbeat = new IdentityHeartbeat({
      pool: app.pg,
      broker: app.broker,
      topicPrefix: app.topicPrefix,
      logger: app.log.child({ component: 'identity-heartbeat' }),
      keyGraceSeconds: config.ACCESS_TOKEN_TTL_SECONDS,
      ...(identityKey ? { identityKey } : {}),
    });
    app.addHook('onReady', async () => heartbeat.start());
    app.addHook('onClose', () => heartbeat.stop());
  },
  { name: 'onto-identity', dependencies: ['onto-postgres', 'onto-kafka', 'onto-outbox', 'onto-redis'] },
);

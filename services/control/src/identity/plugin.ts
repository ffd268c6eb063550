import { authPlugin, parseIdentityPrivateKey } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { bootstrapTokenFault, type Config } from '../config.js';
import { IdentityHeartbeat } from './heartbeat.js';
import { parseKeyEncryptionKey } from './key-encryption.js';
import keyRoutes from './key-routes.js';
import { ControlKeyRing, ControlRevocations, SigningKeys } from './keys.js';
import identityRoutes from './routes.js';

/**
 * Identity in control: the signing keys (sealed at rest, created and published at first boot,
 * rotated by age and on request), verification from control's own tables (strongly consistent),
 * the identity routes, and the heartbeat that lets data and intelligence bound how far behind
 * their replica of revocations is.
 */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    // Refused at boot: a guessable bootstrap token is platform administration for anyone.
    const fault =
      config.ONTO_BOOTSTRAP_TOKEN === undefined ? undefined : bootstrapTokenFault(config.ONTO_BOOTSTRAP_TOKEN);
    if (fault) throw new Error(fault);
    const identityKey = parseIdentityPrivateKey(config.ONTO_IDENTITY_PRIVATE_KEY);
    const signingKeys = new SigningKeys(
      app.pg,
      app.topicPrefix,
      identityKey,
      parseKeyEncryptionKey(config.ONTO_KEY_ENCRYPTION_KEY),
      config.ONTO_KEY_ENCRYPTION_KEY_PREVIOUS === undefined
        ? undefined
        : parseKeyEncryptionKey(config.ONTO_KEY_ENCRYPTION_KEY_PREVIOUS, 'ONTO_KEY_ENCRYPTION_KEY_PREVIOUS'),
    );
    // Refused at boot as well: stored keys the KEK does not open (a wrong or a new KEK).
    const { sealed, resealed } = await signingKeys.prepare();
    if (sealed > 0) app.log.info({ sealed }, 'sealed signing keys stored in the clear by an earlier version');
    if (resealed > 0)
      app.log.info({ resealed }, 'sealed the signing keys again under ONTO_KEY_ENCRYPTION_KEY (a KEK rotation)');
    const graceSeconds = config.SIGNING_KEY_GRACE_SECONDS ?? config.ACCESS_TOKEN_TTL_SECONDS;
    await app.register(authPlugin, { keys: new ControlKeyRing(app.pg), revocations: new ControlRevocations(app.pg) });
    await app.register(identityRoutes, {
      signingKeys,
      accessTokenTtlSeconds: config.ACCESS_TOKEN_TTL_SECONDS,
      bootstrapToken: config.ONTO_BOOTSTRAP_TOKEN,
      // Shared by the replicas of one deployment (one database), apart from any other's.
      rateLimitNamespace: `onto-control:${app.topicPrefix}${new URL(config.DATABASE_URL).pathname.slice(1)}:token-exchange:`,
      exchangesPerMinute: {
        perIp: config.TOKEN_EXCHANGES_PER_MINUTE_PER_IP,
        perToken: config.TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN,
      },
    });
    await app.register(keyRoutes, { keys: signingKeys, defaultGraceSeconds: graceSeconds });
    const heartbeat = new IdentityHeartbeat({
      pool: app.pg,
      broker: app.broker,
      topicPrefix: app.topicPrefix,
      logger: app.log.child({ component: 'identity-heartbeat' }),
      identityKey,
    });
    // Rotation by age: one replica a period checks (rotate takes a lock besides), on the job runner.
    const maxAge = config.SIGNING_KEY_MAX_AGE_SECONDS;
    if (maxAge > 0) {
      app.jobs.every('control.signing-key-age', config.SIGNING_KEY_CHECK_INTERVAL_MS, async () => {
        const rotated = await signingKeys.rotate({ graceSeconds, olderThanSeconds: maxAge });
        if (rotated) app.log.info({ ...rotated, maxAgeSeconds: maxAge }, 'rotated the signing key: it reached its age');
      });
    }
    app.addHook('onReady', async () => heartbeat.start());
    app.addHook('onClose', () => heartbeat.stop());
  },
  { name: 'onto-identity', dependencies: ['onto-postgres', 'onto-kafka', 'onto-outbox', 'onto-redis', 'onto-jobs'] },
);

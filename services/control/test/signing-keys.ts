import { parseIdentityPrivateKey } from '@onto/shared';
import { testIdentityEnv } from '@onto/shared/testing';
import type { FastifyInstance } from 'fastify';
import { parseKeyEncryptionKey } from '../src/identity/key-encryption.js';
import { SigningKeys } from '../src/identity/keys.js';

/** The key control signs with now, opened with the test KEK: for tests that sign tokens themselves. */
export function activeSigningKey(app: FastifyInstance) {
  const env = testIdentityEnv();
  return new SigningKeys(
    app.pg,
    app.topicPrefix,
    parseIdentityPrivateKey(env.ONTO_IDENTITY_PRIVATE_KEY),
    parseKeyEncryptionKey(env.ONTO_KEY_ENCRYPTION_KEY),
  ).active();
}

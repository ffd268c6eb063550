import { randomBytes } from 'node:crypto';
import { generateIdentityKeyPair } from '../auth/identity-signature.js';

let pair: { privateKey: string; publicKey: string } | undefined;
let kek: string | undefined;

/** One identity key pair per test process (ADR 35): control signs with it, the replicas verify. */
export function testIdentityKeys(): { privateKey: string; publicKey: string } {
  pair ??= generateIdentityKeyPair();
  return pair;
}

/** One key-encryption key per test process (ADR 42): control seals its signing keys with it. */
export function testKeyEncryptionKey(): string {
  kek ??= randomBytes(32).toString('base64');
  return kek;
}

/**
 * The environment that gives a service of a test stack its keys, all required: both halves of the
 * identity key and control's key-encryption key; each service reads its own.
 */
export function testIdentityEnv(): {
  ONTO_IDENTITY_PRIVATE_KEY: string;
  ONTO_IDENTITY_PUBLIC_KEY: string;
  ONTO_KEY_ENCRYPTION_KEY: string;
} {
  const { privateKey, publicKey } = testIdentityKeys();
  return {
    ONTO_IDENTITY_PRIVATE_KEY: privateKey,
    ONTO_IDENTITY_PUBLIC_KEY: publicKey,
    ONTO_KEY_ENCRYPTION_KEY: testKeyEncryptionKey(),
  };
}

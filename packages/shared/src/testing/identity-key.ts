import { generateIdentityKeyPair } from '../auth/identity-signature.js';

let pair: { privateKey: string; publicKey: string } | undefined;

/** One identity key pair per test process (ADR 35): control signs with it, the replicas verify. */
export function testIdentityKeys(): { privateKey: string; publicKey: string } {
  pair ??= generateIdentityKeyPair();
  return pair;
}

/** The environment that gives a service of a test stack the identity key: both halves, each service reads its own. */
export function testIdentityEnv(): { ONTO_IDENTITY_PRIVATE_KEY: string; ONTO_IDENTITY_PUBLIC_KEY: string } {
  const { privateKey, publicKey } = testIdentityKeys();
  return { ONTO_IDENTITY_PRIVATE_KEY: privateKey, ONTO_IDENTITY_PUBLIC_KEY: publicKey };
}

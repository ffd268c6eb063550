import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { JWK } from '@onto/shared';

/**
 * The private halves of the token-signing keys are sealed at rest (ADR 42) with AES-256-GCM under
 * a key-encryption key (KEK) from the environment, ONTO_KEY_ENCRYPTION_KEY: a copy of control's
 * database (a backup, a replica, a dump) then mints no token. The key id is the additional
 * authenticated data, so a sealed key moved to another row does not open.
 *
 * Layout: version (1 byte, 1) | IV (12) | tag (16) | ciphertext of the JWK's JSON.
 */
const VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** The KEK: 32 bytes as base64 (`openssl rand -base64 32`) or as 64 hexadecimal digits. */
export function parseKeyEncryptionKey(text: string, name = 'ONTO_KEY_ENCRYPTION_KEY'): Buffer {
  const trimmed = text.trim();
  const bytes = /^[0-9a-f]{64}$/i.test(trimmed) ? Buffer.from(trimmed, 'hex') : Buffer.from(trimmed, 'base64');
  if (bytes.length !== 32 || (!/^[0-9a-f]{64}$/i.test(trimmed) && !/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed))) {
    throw new Error(`${name} must be 32 random bytes, base64 (openssl rand -base64 32) or 64 hexadecimal digits`);
  }
  return bytes;
}

const aad = (kid: string) => Buffer.from(`onto-signing-key:${kid}`, 'utf8');

export function sealPrivateKey(kek: Buffer, kid: string, jwk: JWK): Buffer {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', kek, iv).setAAD(aad(kid));
  const body = Buffer.concat([cipher.update(JSON.stringify(jwk), 'utf8'), cipher.final()]);
  return Buffer.concat([Buffer.of(VERSION), iv, cipher.getAuthTag(), body]);
}

/** The JWK sealed in `sealed`; throws when the KEK is not the one it was sealed with. */
export function openPrivateKey(kek: Buffer, kid: string, sealed: Buffer): JWK {
  if (sealed.length < 1 + IV_BYTES + TAG_BYTES || sealed[0] !== VERSION) {
    throw new Error(`the sealed signing key ${kid} is not in a format this version reads`);
  }
  const iv = sealed.subarray(1, 1 + IV_BYTES);
  const tag = sealed.subarray(1 + IV_BYTES, 1 + IV_BYTES + TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', kek, iv).setAAD(aad(kid)).setAuthTag(tag);
  try {
    const json = Buffer.concat([decipher.update(sealed.subarray(1 + IV_BYTES + TAG_BYTES)), decipher.final()]);
    return JSON.parse(json.toString('utf8')) as JWK;
  } catch {
    throw new Error(
      `ONTO_KEY_ENCRYPTION_KEY does not open the signing key ${kid} stored in control's database: it is not the key the signing keys were encrypted with`,
    );
  }
}

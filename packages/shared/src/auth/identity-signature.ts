import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { canonicalJson } from '../json/canonical.js';

/**
 * The long-lived identity key (ADR 35): control signs every `identity.keys.published` and
 * `identity.heartbeat` payload with its private half; data and intelligence refuse any whose
 * signature does not verify with the public half. The signature is Ed25519 over the canonical
 * JSON (keys sorted) of the payload without its `signature` field, base64url in that field.
 */
export const IDENTITY_SIGNATURE_FIELD = 'signature';

/** A PEM, or the base64 of a PEM or of a DER (PKCS#8 private, SPKI public) key. */
function keyMaterial(text: string): { key: string | Buffer; format: 'pem' | 'der' } {
  const trimmed = text.trim();
  if (trimmed.startsWith('-----BEGIN')) return { key: trimmed, format: 'pem' };
  const decoded = Buffer.from(trimmed, 'base64');
  const asText = decoded.toString('utf8');
  return asText.startsWith('-----BEGIN') ? { key: asText, format: 'pem' } : { key: decoded, format: 'der' };
}

export function parseIdentityPrivateKey(text: string): KeyObject {
  const { key, format } = keyMaterial(text);
  const parsed =
    format === 'pem' ? createPrivateKey(key) : createPrivateKey({ key: key as Buffer, format, type: 'pkcs8' });
  if (parsed.asymmetricKeyType !== 'ed25519') throw new Error('the identity private key must be an Ed25519 key');
  return parsed;
}

export function parseIdentityPublicKey(text: string): KeyObject {
  const { key, format } = keyMaterial(text);
  const parsed =
    format === 'pem' ? createPublicKey(key) : createPublicKey({ key: key as Buffer, format, type: 'spki' });
  if (parsed.asymmetricKeyType !== 'ed25519') throw new Error('the identity public key must be an Ed25519 key');
  return parsed;
}

/** A fresh identity key pair as PEM: for `./onto`'s first start and for tests. */
export function generateIdentityKeyPair(): { privateKey: string; publicKey: string } {
  return generateKeyPairSync('ed25519', {
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
}

function signedBytes(payload: Record<string, unknown>): Buffer {
  const { [IDENTITY_SIGNATURE_FIELD]: _signature, ...rest } = payload;
  return Buffer.from(canonicalJson(rest), 'utf8');
}

/** `payload` with its signature added. */
export function signIdentityPayload<P extends Record<string, unknown>>(
  privateKey: KeyObject,
  payload: P,
): P & { signature: string } {
  const signature = sign(null, signedBytes(payload), privateKey).toString('base64url');
  return { ...payload, [IDENTITY_SIGNATURE_FIELD]: signature };
}

/** Whether `payload` carries a signature by `publicKey` over the rest of it. */
export function identityPayloadSigned(publicKey: KeyObject, payload: Record<string, unknown>): boolean {
  const signature = payload[IDENTITY_SIGNATURE_FIELD];
  if (typeof signature !== 'string' || signature.length === 0) return false;
  try {
    return verify(null, signedBytes(payload), publicKey, Buffer.from(signature, 'base64url'));
  } catch {
    return false;
  }
}

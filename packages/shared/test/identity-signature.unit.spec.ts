import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  generateIdentityKeyPair,
  identityPayloadSigned,
  parseIdentityPrivateKey,
  parseIdentityPublicKey,
  signIdentityPayload,
} from '../src/auth/identity-signature.js';

const pair = generateIdentityKeyPair();
const privateKey = parseIdentityPrivateKey(pair.privateKey);
const publicKey = parseIdentityPublicKey(pair.publicKey);

describe('identity signatures (ADR 35)', () => {
  it('verifies what the identity key signed, whatever the order of its fields', () => {
    const signed = signIdentityPayload(privateKey, { watermark: 1, keys: [] });
    expect(identityPayloadSigned(publicKey, signed)).toBe(true);
    expect(identityPayloadSigned(publicKey, { keys: [], signature: signed.signature, watermark: 1 })).toBe(true);
  });

  it('refuses a changed payload, a missing signature and another key’s', () => {
    const signed = signIdentityPayload(privateKey, { watermark: 1, keys: [] });
    expect(identityPayloadSigned(publicKey, { ...signed, watermark: 2 })).toBe(false);
    expect(identityPayloadSigned(publicKey, { watermark: 1, keys: [] })).toBe(false);
    expect(identityPayloadSigned(publicKey, { ...signed, signature: 'not base64url!' })).toBe(false);
    const other = parseIdentityPrivateKey(generateIdentityKeyPair().privateKey);
    expect(identityPayloadSigned(publicKey, signIdentityPayload(other, { watermark: 1, keys: [] }))).toBe(false);
  });

  it('reads PEM, base64 of PEM and base64 of DER, and refuses a key that is not Ed25519', () => {
    const der = createPrivateKey(pair.privateKey).export({ type: 'pkcs8', format: 'der' }).toString('base64');
    const publicDer = createPublicKey(pair.publicKey).export({ type: 'spki', format: 'der' }).toString('base64');
    const signed = signIdentityPayload(parseIdentityPrivateKey(der), { keys: [] });
    expect(identityPayloadSigned(parseIdentityPublicKey(publicDer), signed)).toBe(true);
    const base64Pem = Buffer.from(pair.publicKey).toString('base64');
    expect(identityPayloadSigned(parseIdentityPublicKey(base64Pem), signed)).toBe(true);
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' });
    expect(() => parseIdentityPrivateKey(String(rsa))).toThrow(/Ed25519/);
  });
});

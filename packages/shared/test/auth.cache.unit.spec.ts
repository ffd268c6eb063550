import { describe, expect, it } from 'vitest';
import {
  generateSigningKey,
  importSigningKey,
  importVerificationKey,
  type KeyRing,
  signAccessToken,
  verifyAccessToken,
} from '../src/auth/tokens.js';
import { Unauthorized } from '../src/errors/problem.js';

// Verified tokens are remembered per key ring; a remembered token must still expire, and must
// be verified again when the ring answers another key for it.
describe('verified-token cache', () => {
  const grant = { userId: 'ann', apiTokenId: 'api-1', generation: 0, admin: false, roles: {} };

  async function ring() {
    const signing = await generateSigningKey();
    const key = { kid: signing.kid, privateKey: await importSigningKey(signing.privateJwk) };
    const current = { value: await importVerificationKey(signing.publicJwk) };
    const keys: KeyRing = { key: async (kid) => (kid === signing.kid ? current.value : undefined) };
    return { key, keys, current };
  }

  it('answers a token it verified again without a signature check, until it expires', async () => {
    const { key, keys } = await ring();
    const now = Math.floor(Date.now() / 1000);
    // Expiry whole seconds away (JWT times are seconds): a busy machine's first verify still comes before it.
    const { token } = await signAccessToken(key, { ...grant, ttlSeconds: 3, issuedAt: now });
    const first = await verifyAccessToken(token, keys);
    expect(await verifyAccessToken(token, keys)).toBe(first); // the remembered claims
    // A wait for time itself: what is tested is that the clock passing the expiry ends the reuse.
    const pastExpiryMs = (first.exp - Date.now() / 1000) * 1000 + 50;
    await new Promise((r) => setTimeout(r, pastExpiryMs));
    await expect(verifyAccessToken(token, keys)).rejects.toThrow(new Unauthorized('the access token has expired'));
  });

  it('checks the signature again when the key ring answers another key for the token', async () => {
    const { key, keys, current } = await ring();
    const { token } = await signAccessToken(key, { ...grant, ttlSeconds: 60 });
    await verifyAccessToken(token, keys);
    const stranger = await generateSigningKey();
    current.value = await importVerificationKey({ ...stranger.publicJwk, kid: key.kid });
    await expect(verifyAccessToken(token, keys)).rejects.toThrow('the access token is invalid');
  });
});

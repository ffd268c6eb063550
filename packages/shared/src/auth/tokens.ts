import { randomUUID } from 'node:crypto';
import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import {
  type CryptoKey,
  calculateJwkThumbprint,
  decodeJwt,
  decodeProtectedHeader,
  errors,
  exportJWK,
  generateKeyPair,
  importJWK,
  type JWK,
  jwtVerify,
  SignJWT,
} from 'jose';
import { Unauthorized } from '../errors/problem.js';
import { type Principal, WORLD_ROLES, type WorldRole } from './types.js';

export type { CryptoKey, JWK } from 'jose';

/**
 * The access token is the contract between control, which signs it, and every service, which
 * verifies it: an EdDSA (Ed25519) JWT of type `at+jwt` with these claims.
 */
export const ACCESS_TOKEN_ISSUER = 'onto-control';
export const ACCESS_TOKEN_AUDIENCE = 'onto';
export const ACCESS_TOKEN_TYPE = 'at+jwt';
export const ACCESS_TOKEN_ALG = 'EdDSA';

export const WorldRoleSchema = Type.Union(WORLD_ROLES.map((r) => Type.Literal(r)));

export const AccessTokenClaimsSchema = Type.Object({
  iss: Type.Literal(ACCESS_TOKEN_ISSUER),
  aud: Type.Literal(ACCESS_TOKEN_AUDIENCE),
  sub: Type.String({ minLength: 1 }),
  jti: Type.String({ minLength: 1 }),
  /** The API token this access token was exchanged from. */
  ati: Type.String({ minLength: 1 }),
  /** The user's token generation when it was issued; a lower generation than the user's current one is revoked. */
  gen: Type.Integer({ minimum: 0 }),
  adm: Type.Boolean(),
  roles: Type.Record(Type.String(), WorldRoleSchema),
  iat: Type.Integer(),
  exp: Type.Integer(),
});
export type AccessTokenClaims = Static<typeof AccessTokenClaimsSchema>;
const claimsCheck = TypeCompiler.Compile(AccessTokenClaimsSchema);

/** An Ed25519 public key as published on onto.identity. */
export const PublicSigningKeySchema = Type.Object({
  kid: Type.String({ minLength: 1, maxLength: 128 }),
  kty: Type.Literal('OKP'),
  crv: Type.Literal('Ed25519'),
  x: Type.String({ minLength: 1, maxLength: 128 }),
  alg: Type.Optional(Type.Literal(ACCESS_TOKEN_ALG)),
  use: Type.Optional(Type.Literal('sig')),
  /**
   * A retired key (ADR 42): tokens it signed are refused from this instant (ms since the epoch).
   * Not part of the key's thumbprint; absent while the key is active.
   */
  refusedAfter: Type.Optional(Type.Integer({ minimum: 0 })),
});
export type PublicSigningKey = Static<typeof PublicSigningKeySchema>;

/** Where verification finds the public key that signed a token. */
export interface KeyRing {
  /**
   * The key named `kid`, or undefined when no such key exists. A view that cannot tell yet (a
   * replica that has not caught up with the token's issue time) throws Unavailable instead.
   */
  key(kid: string, issuedAtSeconds: number): Promise<CryptoKey | undefined>;
}

export interface SigningKey {
  kid: string;
  privateJwk: JWK;
  publicJwk: PublicSigningKey;
}

/** A fresh Ed25519 key pair; the kid is the RFC 7638 thumbprint of the public key. */
export async function generateSigningKey(): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(ACCESS_TOKEN_ALG, { crv: 'Ed25519', extractable: true });
  const pub = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(pub);
  return {
    kid,
    privateJwk: { ...(await exportJWK(privateKey)), kid, alg: ACCESS_TOKEN_ALG },
    publicJwk: { kid, kty: 'OKP', crv: 'Ed25519', x: String(pub.x), alg: ACCESS_TOKEN_ALG, use: 'sig' },
  };
}

export const importSigningKey = (jwk: JWK) => importJWK(jwk, ACCESS_TOKEN_ALG) as Promise<CryptoKey>;
export const importVerificationKey = (jwk: PublicSigningKey) =>
  importJWK({ kty: jwk.kty, crv: jwk.crv, x: jwk.x }, ACCESS_TOKEN_ALG) as Promise<CryptoKey>;

export interface AccessTokenGrant {
  userId: string;
  apiTokenId: string;
  generation: number;
  admin: boolean;
  roles: Record<string, WorldRole>;
  ttlSeconds: number;
  /** Seconds since the epoch; now unless given (tests make expired tokens with it). */
  issuedAt?: number;
  tokenId?: string;
}

export async function signAccessToken(
  key: { kid: string; privateKey: CryptoKey },
  grant: AccessTokenGrant,
): Promise<{ token: string; tokenId: string; expiresAt: number }> {
  const iat = grant.issuedAt ?? Math.floor(Date.now() / 1000);
  const exp = iat + grant.ttlSeconds;
  const tokenId = grant.tokenId ?? randomUUID();
  const token = await new SignJWT({
    ati: grant.apiTokenId,
    gen: grant.generation,
    adm: grant.admin,
    roles: grant.roles,
  })
    .setProtectedHeader({ alg: ACCESS_TOKEN_ALG, kid: key.kid, typ: ACCESS_TOKEN_TYPE })
    .setIssuer(ACCESS_TOKEN_ISSUER)
    .setAudience(ACCESS_TOKEN_AUDIENCE)
    .setSubject(grant.userId)
    .setJti(tokenId)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(key.privateKey);
  return { token, tokenId, expiresAt: exp };
}

/**
 * Checks an access token's signature (EdDSA only: `none`, HMAC and every other algorithm are
 * refused before any key is looked up), type, issuer, audience, expiry and claims. Throws
 * Unauthorized, or whatever the key ring throws (Unavailable when it cannot tell yet).
 */
// Verified tokens, per key ring: a client sends the same access token with every request, and an
// EdDSA verification costs more than the rest of authorisation. An entry is used only while the
// key ring still answers the same key for the token and the token has not expired; revocation is
// checked on every request after this, cached or not.
const VERIFIED_MAX = 10_000;
const verified = new WeakMap<KeyRing, Map<string, { key: unknown; kid: string; claims: AccessTokenClaims }>>();

export async function verifyAccessToken(token: string, keys: KeyRing): Promise<AccessTokenClaims> {
  let cache = verified.get(keys);
  if (!cache) {
    cache = new Map();
    verified.set(keys, cache);
  }
  const hit = cache.get(token);
  if (hit) {
    if (hit.claims.exp * 1000 <= Date.now()) {
      cache.delete(token);
      throw new Unauthorized('the access token has expired');
    }
    // The kid was read from this very token when it was verified (decoding it again was a third
    // of a cached check).
    if ((await keys.key(hit.kid, hit.claims.iat)) === hit.key) return hit.claims;
    cache.delete(token);
  }
  const { claims, key, kid } = await verifyUncached(token, keys);
  if (cache.size >= VERIFIED_MAX) cache.delete(cache.keys().next().value as string);
  cache.set(token, { key, kid, claims });
  return claims;
}

async function verifyUncached(
  token: string,
  keys: KeyRing,
): Promise<{ claims: AccessTokenClaims; key: unknown; kid: string }> {
  let kid: unknown;
  let iat: unknown;
  try {
    const header = decodeProtectedHeader(token);
    if (header.alg !== ACCESS_TOKEN_ALG)
      throw new Unauthorized(`the access token must be signed with ${ACCESS_TOKEN_ALG}`);
    kid = header.kid;
    iat = decodeJwt(token).iat;
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    throw new Unauthorized('the bearer token is not a well-formed JWT');
  }
  if (typeof kid !== 'string' || kid.length === 0) throw new Unauthorized('the access token names no signing key');
  const key = await keys.key(kid, typeof iat === 'number' ? iat : 0);
  if (!key) throw new Unauthorized('the access token is signed by an unknown key');
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(token, key, {
      algorithms: [ACCESS_TOKEN_ALG],
      issuer: ACCESS_TOKEN_ISSUER,
      audience: ACCESS_TOKEN_AUDIENCE,
      typ: ACCESS_TOKEN_TYPE,
      requiredClaims: ['exp', 'iat', 'jti', 'sub'],
    }));
  } catch (error) {
    if (error instanceof errors.JWTExpired) throw new Unauthorized('the access token has expired');
    throw new Unauthorized('the access token is invalid');
  }
  if (!claimsCheck.Check(payload)) throw new Unauthorized('the access token carries malformed claims');
  return { claims: payload, key, kid };
}

export function principalOfClaims(claims: AccessTokenClaims): Principal {
  return { userId: claims.sub, tokenId: claims.jti, apiTokenId: claims.ati, admin: claims.adm, roles: claims.roles };
}

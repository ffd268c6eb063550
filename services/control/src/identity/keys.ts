import type { KeyObject } from 'node:crypto';
import {
  type AccessTokenClaims,
  type CryptoKey,
  generateSigningKey,
  identityMessage,
  importSigningKey,
  importVerificationKey,
  type JWK,
  type KeyRing,
  Outbox,
  type Principal,
  type PublicSigningKey,
  type RevocationView,
  signIdentityPayload,
  type WorldRole,
} from '@onto/shared';
import type pg from 'pg';
import { transaction } from './repository.js';

export interface ActiveKey {
  kid: string;
  privateKey: CryptoKey;
}

async function activeKey(db: pg.Pool): Promise<ActiveKey | undefined> {
  const { rows } = await db.query<{ kid: string; private_jwk: JWK }>(
    'SELECT kid, private_jwk FROM signing_keys WHERE retired_at IS NULL',
  );
  const row = rows[0];
  return row ? { kid: row.kid, privateKey: await importSigningKey(row.private_jwk) } : undefined;
}

/**
 * The key control signs access tokens with: the active one, or a new Ed25519 key when there is
 * none, created with `identity.keys.published` in the same transaction so that the other services
 * learn the public key before any token signed with it can reach them.
 */
export async function ensureSigningKey(
  pool: pg.Pool,
  topicPrefix: string,
  identityKey: KeyObject | undefined,
): Promise<ActiveKey> {
  const existing = await activeKey(pool);
  if (existing) return existing;
  const fresh = await generateSigningKey();
  await transaction(pool, async (tx) => {
    // Two instances booting at once: the unique index keeps one key; the loser publishes nothing.
    const { rowCount } = await tx.query(
      'INSERT INTO signing_keys (kid, private_jwk, public_jwk) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
      [fresh.kid, fresh.privateJwk, fresh.publicJwk],
    );
    if (rowCount) {
      await new Outbox(tx, topicPrefix).add(
        identityMessage('identity.keys.published', 'keys', signedByIdentity(identityKey, { keys: [fresh.publicJwk] })),
      );
    }
  });
  const active = await activeKey(pool);
  if (!active) throw new Error('no active signing key after creating one');
  return active;
}

/** `payload` signed by the identity key (ADR 35), or as it is when control has none. */
export function signedByIdentity<P extends Record<string, unknown>>(identityKey: KeyObject | undefined, payload: P): P {
  return identityKey ? signIdentityPayload(identityKey, payload) : payload;
}

/** Control's own keys, read from its database and kept in memory (a key never changes). */
export class ControlKeyRing implements KeyRing {
  private readonly cache = new Map<string, CryptoKey>();
  constructor(private readonly pool: pg.Pool) {}

  async key(kid: string): Promise<CryptoKey | undefined> {
    const cached = this.cache.get(kid);
    if (cached) return cached;
    const { rows } = await this.pool.query<{ public_jwk: PublicSigningKey }>(
      'SELECT public_jwk FROM signing_keys WHERE kid = $1',
      [kid],
    );
    const jwk = rows[0]?.public_jwk;
    if (!jwk) return undefined;
    const key = await importVerificationKey(jwk);
    this.cache.set(kid, key);
    return key;
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Control decides from its own tables on every request (strong, no window): the API token not
 * revoked, the access token not revoked, the user's token generation not raised since; and it
 * authorises with the roles the user holds now rather than those the token carries.
 */
export class ControlRevocations implements RevocationView {
  constructor(private readonly pool: pg.Pool) {}

  async principal(claims: AccessTokenClaims): Promise<Principal | null> {
    if (!UUID.test(claims.ati)) return null;
    const { rows } = await this.pool.query<{
      generation: number;
      api_revoked: boolean;
      revoked: boolean;
      admin: boolean;
      roles: Record<string, WorldRole>;
    }>(
      `SELECT u.token_generation AS generation, t.revoked_at IS NOT NULL AS api_revoked,
              EXISTS (SELECT 1 FROM revocations r WHERE r.kind = 'access_token' AND r.token_id = $3) AS revoked,
              EXISTS (SELECT 1 FROM platform_admins a WHERE a.user_id = u.id) AS admin,
              (SELECT coalesce(jsonb_object_agg(w.world_id, w.role), '{}') FROM world_roles w WHERE w.user_id = u.id) AS roles
         FROM users u JOIN api_tokens t ON t.user_id = u.id
        WHERE u.id = $1 AND t.id = $2::uuid`,
      [claims.sub, claims.ati, claims.jti],
    );
    const row = rows[0];
    if (!row || row.api_revoked || row.revoked || claims.gen < row.generation) return null;
    return { userId: claims.sub, tokenId: claims.jti, apiTokenId: claims.ati, admin: row.admin, roles: row.roles };
  }
}

import type { KeyObject } from 'node:crypto';
import {
  type AccessTokenClaims,
  advisoryLockKey,
  type CryptoKey,
  generateSigningKey,
  identityMessage,
  importSigningKey,
  importVerificationKey,
  type JWK,
  type KeyRing,
  lockSpace,
  Outbox,
  type Principal,
  type PublicSigningKey,
  type RevocationView,
  signIdentityPayload,
  Unauthorized,
  type WorldRole,
} from '@onto/shared';
import type pg from 'pg';
import { openPrivateKey, sealPrivateKey } from './key-encryption.js';
import { transaction } from './repository.js';

export interface ActiveKey {
  kid: string;
  privateKey: CryptoKey;
}

/** What one rotation did: the key that signs from now on, and the one retired. */
export interface Rotation {
  kid: string;
  /** When the new key starts signing (ms since the epoch): announced to the replicas until then. */
  signsFrom: number;
  retiredKid: string | null;
  /** Tokens signed by the retired key are refused from this instant (ms since the epoch). */
  refusedAfter: number | null;
}

export interface SigningKeyInfo {
  kid: string;
  createdAt: string;
  signsFrom: string;
  retiredAt: string | null;
  refusedAfter: string | null;
}

/**
 * The token-signing keys in control's database (ADR 6, ADR 42): one active key signs, retired ones
 * still verify until their `refused_after`. Private halves are sealed with the key-encryption key;
 * a retired key's is erased once it no longer signs. Every new key and every retirement is
 * published on onto.identity in the transaction that makes it, signed by the identity key (ADR
 * 35), and a new key signs only `announceMs` later, so the replicas learn it before any token it
 * signs can reach them, and refuse a retired one when control does.
 */
export class SigningKeys {
  /** Opened private keys by kid: a key never changes, and opening one costs a decryption. */
  private readonly opened = new Map<string, CryptoKey>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly topicPrefix: string,
    private readonly identityKey: KeyObject,
    private readonly kek: Buffer,
    /** The KEK being rotated away from (ONTO_KEY_ENCRYPTION_KEY_PREVIOUS): keys it sealed are sealed again under `kek`. */
    private readonly previousKek?: Buffer,
    /** How long a new key is announced before it signs (SIGNING_KEY_ANNOUNCE_MS). */
    private readonly announceMs = 0,
  ) {}

  /**
   * At boot: seals private keys an earlier version stored in the clear, seals again under the KEK
   * the keys the previous KEK sealed (a KEK rotation), refuses to go on when neither opens a
   * stored key, and makes a key when there is none.
   */
  async prepare(): Promise<{ sealed: number; resealed: number }> {
    const sealed = await transaction(this.pool, async (tx) => {
      const { rows } = await tx.query<{ kid: string; private_jwk: JWK }>(
        'SELECT kid, private_jwk FROM signing_keys WHERE private_jwk IS NOT NULL FOR UPDATE',
      );
      for (const row of rows) {
        await tx.query('UPDATE signing_keys SET private_key_sealed = $2, private_jwk = NULL WHERE kid = $1', [
          row.kid,
          sealPrivateKey(this.kek, row.kid, row.private_jwk),
        ]);
      }
      return rows.length;
    });
    const resealed = await transaction(this.pool, async (tx) => {
      // Locked, so that replicas booting at once each see the other's work, and reseal nothing twice.
      const { rows } = await tx.query<{ kid: string; private_key_sealed: Buffer }>(
        'SELECT kid, private_key_sealed FROM signing_keys WHERE private_key_sealed IS NOT NULL ORDER BY kid FOR UPDATE',
      );
      let n = 0;
      for (const row of rows) {
        const jwk = this.openEither(row.kid, row.private_key_sealed); // throws: boot refused
        if (jwk.under === 'current') continue;
        await tx.query('UPDATE signing_keys SET private_key_sealed = $2 WHERE kid = $1', [
          row.kid,
          sealPrivateKey(this.kek, row.kid, jwk.jwk),
        ]);
        n++;
      }
      return n;
    });
    await this.active();
    return { sealed, resealed };
  }

  /** The JWK sealed in `sealed`, by the KEK or else the previous one; throws the KEK's error when neither opens it. */
  private openEither(kid: string, sealed: Buffer): { jwk: JWK; under: 'current' | 'previous' } {
    try {
      return { jwk: openPrivateKey(this.kek, kid, sealed), under: 'current' };
    } catch (error) {
      if (!this.previousKek) throw error;
      try {
        return { jwk: openPrivateKey(this.previousKek, kid, sealed), under: 'previous' };
      } catch {
        throw new Error(
          `neither ONTO_KEY_ENCRYPTION_KEY nor ONTO_KEY_ENCRYPTION_KEY_PREVIOUS opens the signing key ${kid} stored in control's database`,
        );
      }
    }
  }

  /** The key that signs now: read on every call, so a rotation by another replica takes effect at once. */
  async active(): Promise<ActiveKey> {
    const row = await this.signingRow(this.pool);
    if (row) return { kid: row.kid, privateKey: await this.open(row.kid, row.private_key_sealed) };
    await transaction(this.pool, async (tx) => {
      // Two instances booting at once: the unique index keeps one key; the loser publishes nothing.
      // The first key signs at once: there is no replica it could have been announced to yet.
      await this.insertKey(tx, [], 0);
    });
    const created = await this.signingRow(this.pool);
    if (!created) throw new Error('no active signing key after creating one');
    return { kid: created.kid, privateKey: await this.open(created.kid, created.private_key_sealed) };
  }

  /**
   * Retires the active key and announces a new one, which signs from `announceMs` later (at once
   * with a grace of 0: a leaked key must stop signing now). Until then the key signing now goes on
   * signing; tokens it signed verify for `graceSeconds` after it stopped, then nowhere.
   * `olderThanSeconds` rotates only a key that has signed at least that long: the periodic check,
   * which also skips while another replica holds the rotation lock.
   */
  async rotate(opts: {
    graceSeconds: number;
    olderThanSeconds?: number;
    /** Runs in the rotation's transaction (the audit record of an operator's rotation). */
    also?: (tx: pg.ClientBase, rotation: Rotation) => Promise<void>;
  }): Promise<Rotation | null> {
    return transaction(this.pool, async (tx) => {
      // One rotation at a time across replicas: an operator's waits its turn (and then rotates the
      // key the other made), the periodic check skips.
      const lock = [lockSpace('skey'), advisoryLockKey(this.topicPrefix)];
      if (opts.olderThanSeconds === undefined) {
        await tx.query('SELECT pg_advisory_xact_lock($1, $2)', lock);
      } else {
        const { rows } = await tx.query<{ locked: boolean }>(
          'SELECT pg_try_advisory_xact_lock($1, $2) AS locked',
          lock,
        );
        if (!rows[0]?.locked) return null;
      }
      const announceMs = opts.graceSeconds === 0 ? 0 : this.announceMs;
      // Every retired key still verifying past the new limit is refused from it too: a rotation
      // within another's announcement (or a leak's grace of 0) refuses the key that signs now as
      // well. Instants only ever move earlier, as the replicas record them.
      const { rows } = await tx.query<{ kid: string; public_jwk: PublicSigningKey; refused_after: string }>(
        `WITH limits AS (
           SELECT now() + make_interval(secs => $3::float8 / 1000) AS signs_from,
                  now() + make_interval(secs => $3::float8 / 1000 + $1::float8) AS refused_after
         ), retired AS (
           UPDATE signing_keys k
              SET retired_at = coalesce(k.retired_at, now()),
                  refused_after = least(coalesce(k.refused_after, 'infinity'), l.refused_after),
                  private_key_sealed = CASE WHEN $1::float8 = 0 THEN NULL ELSE k.private_key_sealed END,
                  private_jwk = NULL
             FROM limits l
            WHERE (k.retired_at IS NULL
                   AND ($2::float8 IS NULL OR k.signs_from <= now() - make_interval(secs => $2)))
               OR (k.retired_at IS NOT NULL AND k.refused_after > l.refused_after
                   AND EXISTS (SELECT 1 FROM signing_keys a
                                WHERE a.retired_at IS NULL
                                  AND ($2::float8 IS NULL OR a.signs_from <= now() - make_interval(secs => $2))))
           RETURNING k.kid, k.public_jwk, k.retired_at = now() AS now_retired,
                     floor(extract(epoch FROM k.refused_after) * 1000)::int8 AS refused_after
         )
         SELECT kid, public_jwk, refused_after::text FROM retired ORDER BY now_retired DESC, kid`,
        [opts.graceSeconds, opts.olderThanSeconds ?? null, announceMs],
      );
      if (rows.length === 0 && opts.olderThanSeconds !== undefined) return null;
      const retiredKeys = rows.map((r) => ({ ...r.public_jwk, refusedAfter: Number(r.refused_after) }));
      const inserted = await this.insertKey(tx, retiredKeys, announceMs);
      if (!inserted) throw new Error('a signing key appeared while the active one was being retired');
      // The key retired now: the one that was active (the others were retired before).
      const retired = rows[0];
      const rotation = {
        kid: inserted.kid,
        signsFrom: inserted.signsFrom,
        retiredKid: retired?.kid ?? null,
        refusedAfter: retired ? Number(retired.refused_after) : null,
      };
      await opts.also?.(tx, rotation);
      return rotation;
    });
  }

  async list(): Promise<SigningKeyInfo[]> {
    const { rows } = await this.pool.query<SigningKeyInfo>(
      `SELECT kid, to_json(created_at)#>>'{}' AS "createdAt", to_json(signs_from)#>>'{}' AS "signsFrom",
              to_json(retired_at)#>>'{}' AS "retiredAt",
              to_json(refused_after)#>>'{}' AS "refusedAfter"
         FROM signing_keys ORDER BY created_at DESC, kid`,
    );
    return rows;
  }

  /**
   * Inserts a fresh active key that signs from `announceMs` after now and publishes it with
   * `alsoPublish`, in the transaction: the replicas learn it before it signs. Null when one exists.
   */
  private async insertKey(
    tx: pg.ClientBase,
    alsoPublish: PublicSigningKey[],
    announceMs: number,
  ): Promise<{ kid: string; signsFrom: number } | null> {
    const fresh = await generateSigningKey();
    const { rows } = await tx.query<{ signs_from: string }>(
      `INSERT INTO signing_keys (kid, private_key_sealed, public_jwk, signs_from)
       VALUES ($1, $2, $3, now() + make_interval(secs => $4::float8 / 1000)) ON CONFLICT DO NOTHING
       RETURNING floor(extract(epoch FROM signs_from) * 1000)::int8::text AS signs_from`,
      [fresh.kid, sealPrivateKey(this.kek, fresh.kid, fresh.privateJwk), fresh.publicJwk, announceMs],
    );
    const row = rows[0];
    if (!row) return null;
    await new Outbox(tx, this.topicPrefix).add(
      identityMessage(
        'identity.keys.published',
        'keys',
        signIdentityPayload(this.identityKey, { keys: [fresh.publicJwk, ...alsoPublish] }),
      ),
    );
    return { kid: fresh.kid, signsFrom: Number(row.signs_from) };
  }

  /**
   * The key that signs now: the newest whose `signs_from` has come, not yet refused. Retired
   * keys a newer key has replaced (or that are refused) lose their private half in the same
   * statement; usually it finds none to erase.
   */
  private async signingRow(db: pg.Pool | pg.ClientBase) {
    const { rows } = await db.query<{ kid: string; private_key_sealed: Buffer }>(
      `WITH signing AS (
         SELECT kid, private_key_sealed, signs_from FROM signing_keys
          WHERE private_key_sealed IS NOT NULL AND signs_from <= now()
            AND (refused_after IS NULL OR refused_after > now())
          ORDER BY signs_from DESC LIMIT 1
       ), erased AS (
         UPDATE signing_keys k SET private_key_sealed = NULL
          WHERE k.retired_at IS NOT NULL AND k.private_key_sealed IS NOT NULL
            AND (k.refused_after <= now() OR k.signs_from < (SELECT signs_from FROM signing))
         RETURNING k.kid
       )
       SELECT kid, private_key_sealed FROM signing`,
    );
    return rows[0];
  }

  private async open(kid: string, sealed: Buffer): Promise<CryptoKey> {
    const known = this.opened.get(kid);
    if (known) return known;
    // A key another replica has not sealed again yet opens with the previous KEK.
    const key = await importSigningKey(this.openEither(kid, sealed).jwk);
    this.opened.set(kid, key);
    return key;
  }
}

/** How long control's replicas may use a cached answer that a key is still active. */
const ACTIVE_RECHECK_MS = 1000;

/**
 * Control's own keys, read from its database. A retired key's refusal time never changes, so it
 * is kept; that a key is still active is re-read after a second, when another replica may have
 * retired it.
 */
export class ControlKeyRing implements KeyRing {
  private readonly cache = new Map<string, { key: CryptoKey; refusedAfter: number | null; readAt: number }>();
  constructor(private readonly pool: pg.Pool) {}

  async key(kid: string): Promise<CryptoKey | undefined> {
    let entry = this.cache.get(kid);
    if (!entry || (entry.refusedAfter === null && Date.now() - entry.readAt > ACTIVE_RECHECK_MS)) {
      const { rows } = await this.pool.query<{ public_jwk: PublicSigningKey; refused_after: string | null }>(
        `SELECT public_jwk, floor(extract(epoch FROM refused_after) * 1000)::int8 AS refused_after
           FROM signing_keys WHERE kid = $1`,
        [kid],
      );
      const row = rows[0];
      if (!row) return undefined;
      entry = {
        key: entry?.key ?? (await importVerificationKey(row.public_jwk)),
        refusedAfter: row.refused_after === null ? null : Number(row.refused_after),
        readAt: Date.now(),
      };
      this.cache.set(kid, entry);
    }
    if (entry.refusedAfter !== null && entry.refusedAfter <= Date.now()) {
      throw new Unauthorized('the access token is signed by a retired key');
    }
    return entry.key;
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

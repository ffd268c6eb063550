import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { WorldRole } from '@onto/shared';
import type pg from 'pg';

/** One READ COMMITTED transaction on a client of its own. */
export { inTransaction as transaction } from '@onto/shared';

/** API tokens are 256 random bits; only their SHA-256 is stored, so a lookup by hash is safe. */
export const newApiTokenSecret = () => `onto_${randomBytes(32).toString('base64url')}`;
export const hashApiToken = (token: string) => createHash('sha256').update(token, 'utf8').digest();

/** The first administrator, created on first use of ONTO_BOOTSTRAP_TOKEN. */
export const BOOTSTRAP_USER = 'admin';

export interface User {
  id: string;
  displayName: string | null;
  admin: boolean;
  roles: Record<string, WorldRole>;
  createdAt: string;
}

export async function findUser(db: pg.Pool | pg.ClientBase, userId: string): Promise<User | undefined> {
  const { rows } = await db.query<User>(
    `SELECT u.id, u.display_name AS "displayName", to_json(u.created_at)#>>'{}' AS "createdAt",
            EXISTS (SELECT 1 FROM platform_admins a WHERE a.user_id = u.id) AS admin,
            (SELECT coalesce(jsonb_object_agg(w.world_id, w.role), '{}') FROM world_roles w WHERE w.user_id = u.id) AS roles
       FROM users u WHERE u.id = $1`,
    [userId],
  );
  return rows[0];
}

/** Creates a user (and makes it an administrator if asked); false when the id is taken. */
export async function insertUser(
  tx: pg.ClientBase,
  user: { id: string; displayName?: string | undefined; admin: boolean; createdBy: string },
): Promise<boolean> {
  const { rowCount } = await tx.query(
    'INSERT INTO users (id, display_name, created_by) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING',
    [user.id, user.displayName ?? null, user.createdBy],
  );
  if (!rowCount) return false;
  if (user.admin) {
    await tx.query('INSERT INTO platform_admins (user_id, granted_by) VALUES ($1, $2)', [user.id, user.createdBy]);
  }
  return true;
}

export interface ApiTokenInfo {
  id: string;
  name: string | null;
  createdAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

const TOKEN_COLUMNS = `id::text, name, to_json(created_at)#>>'{}' AS "createdAt",
  to_json(revoked_at)#>>'{}' AS "revokedAt", to_json(last_used_at)#>>'{}' AS "lastUsedAt"`;

export async function insertApiToken(
  tx: pg.ClientBase,
  userId: string,
  name: string | undefined,
): Promise<ApiTokenInfo & { token: string }> {
  const token = newApiTokenSecret();
  const { rows } = await tx.query<ApiTokenInfo>(
    `INSERT INTO api_tokens (id, user_id, name, hash) VALUES ($1, $2, $3, $4) RETURNING ${TOKEN_COLUMNS}`,
    [randomUUID(), userId, name ?? null, hashApiToken(token)],
  );
  const row = rows[0];
  if (!row) throw new Error('INSERT … RETURNING returned no row');
  return { ...row, token };
}

export async function listApiTokens(db: pg.Pool, userId: string): Promise<ApiTokenInfo[]> {
  const { rows } = await db.query<ApiTokenInfo>(
    `SELECT ${TOKEN_COLUMNS} FROM api_tokens WHERE user_id = $1 ORDER BY created_at, id`,
    [userId],
  );
  return rows;
}

/** Marks the user's API token revoked: 'revoked' now, 'already' before, or 'missing'. */
export async function markApiTokenRevoked(
  tx: pg.ClientBase,
  userId: string,
  tokenId: string,
  by: { revokedBy: string; requestId: string },
): Promise<'revoked' | 'already' | 'missing'> {
  const { rows } = await tx.query<{ was_revoked: boolean }>(
    `WITH target AS (SELECT id, revoked_at FROM api_tokens WHERE id = $1::uuid AND user_id = $2 FOR UPDATE)
     UPDATE api_tokens t SET revoked_at = coalesce(t.revoked_at, now())
       FROM target WHERE t.id = target.id
     RETURNING target.revoked_at IS NOT NULL AS was_revoked`,
    [tokenId, userId],
  );
  const row = rows[0];
  if (!row) return 'missing';
  if (row.was_revoked) return 'already';
  await tx.query(
    `INSERT INTO revocations (kind, user_id, token_id, revoked_by, request_id) VALUES ('api_token', $1, $2, $3, $4)`,
    [userId, tokenId, by.revokedBy, by.requestId],
  );
  return 'revoked';
}

/** Refuses one access token until it expires; false when it was refused already. */
export async function insertAccessTokenRevocation(
  tx: pg.ClientBase,
  r: { userId: string; tokenId: string; expiresAt: Date; requestId: string },
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `INSERT INTO revocations (kind, user_id, token_id, expires_at, revoked_by, request_id)
     VALUES ('access_token', $1, $2, $3, $1, $4)
     ON CONFLICT (token_id) WHERE kind = 'access_token' DO NOTHING`,
    [r.userId, r.tokenId, r.expiresAt, r.requestId],
  );
  return Boolean(rowCount);
}

/**
 * Makes the bootstrap token the first administrator's API token, idempotently: the user `admin`,
 * its administrator grant and the token (by hash) are created if missing. A bootstrap token once
 * revoked stays revoked. Returns whether anything was created.
 */
export async function ensureBootstrapAdmin(tx: pg.ClientBase, hash: Buffer): Promise<boolean> {
  const user = await tx.query(
    `INSERT INTO users (id, display_name, created_by) VALUES ($1, 'Administrator', 'bootstrap') ON CONFLICT (id) DO NOTHING`,
    [BOOTSTRAP_USER],
  );
  const admin = await tx.query(
    `INSERT INTO platform_admins (user_id, granted_by) VALUES ($1, 'bootstrap') ON CONFLICT (user_id) DO NOTHING`,
    [BOOTSTRAP_USER],
  );
  const token = await tx.query(
    `INSERT INTO api_tokens (id, user_id, name, hash) VALUES ($1, $2, 'bootstrap', $3) ON CONFLICT (hash) DO NOTHING`,
    [randomUUID(), BOOTSTRAP_USER, hash],
  );
  return Boolean(user.rowCount || admin.rowCount || token.rowCount);
}

export interface Redeemed {
  apiTokenId: string;
  userId: string;
  generation: number;
  admin: boolean;
  roles: Record<string, WorldRole>;
}

/**
 * What an access token for this API token carries, or null when the token is unknown or revoked.
 * The user's row is taken FOR SHARE before the roles are read: a concurrent role change (which
 * takes it FOR UPDATE) either waits for this exchange, and then revokes its token by raising the
 * generation, or goes first, and then this exchange reads the new generation and roles.
 */
export async function redeemApiToken(tx: pg.ClientBase, hash: Buffer): Promise<Redeemed | null> {
  const { rows } = await tx.query<{ id: string; user_id: string }>(
    'UPDATE api_tokens SET last_used_at = now() WHERE hash = $1 AND revoked_at IS NULL RETURNING id::text, user_id',
    [hash],
  );
  const token = rows[0];
  if (!token) return null;
  const { rows: users } = await tx.query<{ generation: number }>(
    'SELECT token_generation AS generation FROM users WHERE id = $1 FOR SHARE',
    [token.user_id],
  );
  const user = users[0];
  if (!user) return null;
  const { rows: grants } = await tx.query<{ admin: boolean; roles: Record<string, WorldRole> }>(
    `SELECT EXISTS (SELECT 1 FROM platform_admins WHERE user_id = $1) AS admin,
            (SELECT coalesce(jsonb_object_agg(world_id, role), '{}') FROM world_roles WHERE user_id = $1) AS roles`,
    [token.user_id],
  );
  return {
    apiTokenId: token.id,
    userId: token.user_id,
    generation: user.generation,
    admin: grants[0]?.admin ?? false,
    roles: grants[0]?.roles ?? {},
  };
}

import { identityMessage, NotFound, Outbox, WORLD_ROLES, type WorldRole } from '@onto/shared';
import type pg from 'pg';

export interface RoleGrant {
  userId: string;
  worldId: string;
  role: WorldRole;
  /** The service's topic prefix (`fastify.topicPrefix`): the event goes to `<prefix>onto.identity`. */
  topicPrefix: string;
  /** Who granted it, for the record; the audit entry is the caller's. */
  grantedBy?: string;
  requestId?: string;
}

export interface RoleChangeResult {
  changed: boolean;
  previousRole: WorldRole | null;
  /** The user's token generation after the change; raised when a role was weakened or taken. */
  generation: number;
}

const rank = (role: WorldRole) => WORLD_ROLES.indexOf(role);

/**
 * The user's token generation, with the user's row locked until the transaction ends. The token
 * exchange takes the same row FOR SHARE before it reads roles, so an access token is issued
 * either before a role change (and is revoked by it) or after it (and carries the new roles).
 */
export async function lockUser(tx: pg.ClientBase, userId: string): Promise<number> {
  const { rows } = await tx.query<{ token_generation: number }>(
    'SELECT token_generation FROM users WHERE id = $1 FOR UPDATE',
    [userId],
  );
  const generation = rows[0]?.token_generation;
  if (generation === undefined) throw new NotFound(`user ${userId} does not exist`);
  return generation;
}

/**
 * Revokes every access token of the user issued so far: they carry roles the user may no longer
 * hold. Recorded in `revocations`; the event that tells the other services is the caller's.
 */
async function raiseGeneration(
  tx: pg.ClientBase,
  userId: string,
  by: { revokedBy?: string | undefined; requestId?: string | undefined },
) {
  const { rows } = await tx.query<{ token_generation: number }>(
    'UPDATE users SET token_generation = token_generation + 1 WHERE id = $1 RETURNING token_generation',
    [userId],
  );
  const generation = rows[0]?.token_generation ?? 0;
  await tx.query(
    `INSERT INTO revocations (kind, user_id, generation, revoked_by, request_id)
     VALUES ('user_generation', $1, $2, $3, $4)`,
    [userId, generation, by.revokedBy ?? null, by.requestId ?? null],
  );
  return generation;
}

/**
 * Gives `userId` the `role` in `worldId` (replacing the role held before) in the caller's
 * transaction, and enqueues `identity.roles.changed` in it. A weaker role than before also revokes
 * the user's access tokens. A grant of the role already held changes nothing. Throws NotFound when
 * the user does not exist. World creation calls this to make its creator the owner.
 */
export async function grantRole(tx: pg.ClientBase, grant: RoleGrant): Promise<RoleChangeResult> {
  let generation = await lockUser(tx, grant.userId);
  const previousRole = await currentRole(tx, grant.userId, grant.worldId);
  if (previousRole === grant.role) return { changed: false, previousRole, generation };
  await tx.query(
    `INSERT INTO world_roles (world_id, user_id, role, granted_by) VALUES ($1, $2, $3, $4)
     ON CONFLICT (world_id, user_id)
     DO UPDATE SET role = EXCLUDED.role, granted_at = now(), granted_by = EXCLUDED.granted_by`,
    [grant.worldId, grant.userId, grant.role, grant.grantedBy ?? null],
  );
  if (previousRole !== null && rank(grant.role) < rank(previousRole)) {
    generation = await raiseGeneration(tx, grant.userId, { revokedBy: grant.grantedBy, requestId: grant.requestId });
  }
  await announce(tx, grant, grant.role, previousRole, generation);
  return { changed: true, previousRole, generation };
}

/**
 * Takes the user's role in the world away, revoking the user's access tokens (they carry it), and
 * enqueues `identity.roles.changed`. Returns the role taken, or null when there was none.
 */
export async function revokeRole(
  tx: pg.ClientBase,
  change: Omit<RoleGrant, 'role'>,
): Promise<{ previousRole: WorldRole | null; generation: number }> {
  const current = await lockUser(tx, change.userId);
  const { rows } = await tx.query<{ role: WorldRole }>(
    'DELETE FROM world_roles WHERE world_id = $1 AND user_id = $2 RETURNING role',
    [change.worldId, change.userId],
  );
  const previousRole = rows[0]?.role ?? null;
  if (previousRole === null) return { previousRole, generation: current };
  const generation = await raiseGeneration(tx, change.userId, {
    revokedBy: change.grantedBy,
    requestId: change.requestId,
  });
  await announce(tx, change, null, previousRole, generation);
  return { previousRole, generation };
}

async function currentRole(tx: pg.ClientBase, userId: string, worldId: string): Promise<WorldRole | null> {
  const { rows } = await tx.query<{ role: WorldRole }>(
    'SELECT role FROM world_roles WHERE world_id = $1 AND user_id = $2',
    [worldId, userId],
  );
  return rows[0]?.role ?? null;
}

async function announce(
  tx: pg.ClientBase,
  change: Omit<RoleGrant, 'role'>,
  role: WorldRole | null,
  previousRole: WorldRole | null,
  generation: number,
) {
  await new Outbox(tx, change.topicPrefix).add(
    identityMessage(
      'identity.roles.changed',
      change.userId,
      { userId: change.userId, worldId: change.worldId, role, previousRole, minGeneration: generation },
      { worldId: change.worldId, version: generation, ...(change.requestId ? { requestId: change.requestId } : {}) },
    ),
  );
}

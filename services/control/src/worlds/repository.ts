import { Conflict, NotFound } from '@onto/shared';
import type pg from 'pg';

export const WORLD_STATUSES = ['PROVISIONING', 'READY', 'FAILED', 'DELETING', 'DELETED'] as const;
export type WorldStatus = (typeof WORLD_STATUSES)[number];

/** The world's status, locked for the rest of the transaction; 404 when unknown or deleted. */
export async function lockWorld(tx: pg.ClientBase, worldId: string): Promise<WorldStatus> {
  const { rows } = await tx.query<{ status: WorldStatus }>('SELECT status FROM worlds WHERE id = $1 FOR SHARE', [
    worldId,
  ]);
  const status = rows[0]?.status;
  if (!status || status === 'DELETED') throw new NotFound(`world ${worldId} does not exist`);
  return status;
}

/** Schema and content may change while a world is being provisioned or is ready. */
export async function lockWritableWorld(tx: pg.ClientBase, worldId: string): Promise<WorldStatus> {
  const status = await lockWorld(tx, worldId);
  if (status === 'DELETING' || status === 'FAILED')
    throw new Conflict(`world ${worldId} is ${status}`, { worldStatus: status });
  return status;
}

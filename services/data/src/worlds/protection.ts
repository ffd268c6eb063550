import { HttpProblem } from '@onto/shared';

/** Who writes: a client's request, an action's edit (intelligence's saga), or a CDC source. */
export type WriteVia = 'request' | 'action' | 'cdc';

/** A world's protection as data holds it (docs/adr/0058): read with the world by every write. */
export interface WorldProtection {
  requireMerge: boolean;
  allowActions: boolean;
}

/** The columns of a world's protection, for a statement that reads `worlds` as `alias`. */
export const protectionColumns = (alias: string) =>
  `coalesce(${alias}.require_merge, false) AS require_merge, coalesce(${alias}.allow_actions, false) AS allow_actions`;

/** The protection a row of protectionColumns says. */
export const protectionOf = (row: { require_merge?: boolean; allow_actions?: boolean } | undefined) => ({
  requireMerge: row?.require_merge ?? false,
  allowActions: row?.allow_actions ?? false,
});

/**
 * Refuses a direct write into a world that takes changes by merge only: 403, a problem naming the
 * protection. Merges write through their own path; an action's edits pass when the protection
 * allows them; a CDC source is an ingest the operator configured for the world, not refused here.
 */
export function refuseProtected(world: string, protection: WorldProtection | undefined, via: WriteVia = 'request') {
  if (!protection?.requireMerge || via === 'cdc' || (via === 'action' && protection.allowActions)) return;
  throw new HttpProblem(
    403,
    'protected-world',
    'Forbidden',
    `world ${world} is protected (requireMerge): it changes by merge only${via === 'action' ? ', and its protection does not allow actions' : ''}`,
    { world, protection: { requireMerge: true, allowActions: protection.allowActions } },
  );
}

/**
 * The three-way classification of one definition (docs/adr/0037, 0039), pure: its body at the
 * merge base, in the source and in the target (null: absent or deleted) says what the merge does.
 */
import { type Body, type Kind, sameBody } from './history.js';

export type Case =
  | 'unchanged'
  | 'source-changed'
  | 'target-changed'
  | 'both-alike'
  | 'added'
  | 'deleted'
  | 'modify-modify'
  | 'modify-delete';

/** The case, and whether the merge takes the source's side, keeps the target's or has a conflict. */
export function classify(
  base: Body | null,
  source: Body | null,
  target: Body | null,
): { case: Case; outcome: 'source' | 'target' | 'conflict' } {
  const sourceChanged = !sameBody(base, source);
  const targetChanged = !sameBody(base, target);
  if (!sourceChanged && !targetChanged) return { case: 'unchanged', outcome: 'target' };
  if (!targetChanged) {
    if (base === null) return { case: 'added', outcome: 'source' };
    if (source === null) return { case: 'deleted', outcome: 'source' };
    return { case: 'source-changed', outcome: 'source' };
  }
  if (!sourceChanged) return { case: 'target-changed', outcome: 'target' };
  if (sameBody(source, target)) return { case: 'both-alike', outcome: 'target' };
  // Both changed it differently; a deletion on one side is modify/delete.
  if (source === null || target === null) return { case: 'modify-delete', outcome: 'conflict' };
  return { case: 'modify-modify', outcome: 'conflict' };
}

/** One side's last change of a definition since the base: when, and its definition seq. */
export interface Change {
  /** Microseconds since the epoch (written_at). */
  at: number;
  seq: number;
}

/**
 * TIMESTAMP_WINS: the side whose change is newer; at the same instant, the change with the
 * greater definition seq (one global sequence, so never equal for two changes).
 */
export function newer(source: Change, target: Change): 'source' | 'target' {
  if (source.at !== target.at) return source.at > target.at ? 'source' : 'target';
  return source.seq > target.seq ? 'source' : 'target';
}

export type Strategy = 'SOURCE_WINS' | 'TARGET_WINS' | 'TIMESTAMP_WINS' | 'MANUAL';

/** How a strategy settles a conflict between the two sides (undefined: MANUAL, left open). */
export function settle(strategy: Strategy, source: Change, target: Change): 'source' | 'target' | undefined {
  switch (strategy) {
    case 'SOURCE_WINS':
      return 'source';
    case 'TARGET_WINS':
      return 'target';
    case 'TIMESTAMP_WINS':
      return newer(source, target);
    case 'MANUAL':
      return undefined;
  }
}

/** The conflict's description of why, when the type alone does not say. */
export function conflictReason(kind: Kind, name: string, c: Case, source: Body | null): string | undefined {
  if (c !== 'modify-delete') return undefined;
  return source === null
    ? `${kind} ${name} was deleted in the source and changed in the target`
    : `${kind} ${name} was changed in the source and deleted in the target`;
}

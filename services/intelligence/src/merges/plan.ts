/**
 * intelligence's plan of a merge (docs/adr/0037, 0039): the definitions of the base, the source
 * and the target at their positions, classified three ways, settled by the strategy, checked
 * against the merged schema. Pure but for the reads, so that verify recomputes it the same way.
 */
import type { Queryable } from '@onto/shared';
import { faults, schemaDocument } from './check.js';
import { type Body, definitionsAt, type Kind, sameBody, type Version } from './history.js';
import { type Case, type Change, classify, conflictReason, type Strategy, settle } from './three-way.js';

/** One definition the merge decides on: written, or in conflict. */
export interface Entry {
  kind: Kind;
  name: string;
  case: Case;
  base: Body | null;
  source: Body | null;
  target: Body | null;
  /** The target's version the plan read (null: absent): the apply is conditional on it. */
  targetVersion: number | null;
  sourceAt: string | null;
  targetAt: string | null;
  /** The side the merge takes; absent: an open conflict (MANUAL) until resolved. */
  decided?: 'source' | 'target';
  conflict?: { id: string; reason?: string };
  resolution?: { take: 'source' | 'target' | 'value'; value?: Body };
}

/** The points a merge reads: world and definition position (base null: no common history, empty). */
export interface Points {
  base: { world: string; position: number } | null;
  source: { world: string; position: number };
  target: { world: string; position: number };
}

type Side = ReadonlyMap<string, Version>;
const bodyIn = (side: Side, key: string) => side.get(key)?.body ?? null;
const change = (v: Version | undefined): Change => ({ at: v?.at ?? 0, seq: v?.seq ?? 0 });

/** The body the merge leaves in the target for an entry (undefined: an open conflict). */
export function finalBody(e: Entry): Body | null | undefined {
  const take = e.resolution?.take ?? e.decided;
  if (take === undefined) return undefined;
  if (take === 'value') return e.resolution?.value ?? null;
  return take === 'source' ? e.source : e.target;
}

/**
 * The plan's entries from the three sides: every definition changed on either side since the
 * base is classified; conflicts settled by the strategy; then what the merge would write is
 * checked against the merged schema until it holds — a fault is a conflict that an automatic
 * strategy settles by keeping the target's side (a merge never writes what the target's own
 * PUT would refuse), and MANUAL leaves open.
 */
export function planEntries(
  base: Side,
  source: Side,
  target: Side,
  strategy: Strategy,
  schema: Record<string, unknown>,
): Entry[] {
  const keys = [...new Set([...base.keys(), ...source.keys(), ...target.keys()])].sort();
  const entries = new Map<string, Entry>();
  for (const key of keys) {
    const b = bodyIn(base, key);
    const s = bodyIn(source, key);
    const t = bodyIn(target, key);
    const { case: c, outcome } = classify(b, s, t);
    if (outcome === 'target') continue;
    const v = (source.get(key) ?? target.get(key)) as Version;
    const entry: Entry = {
      kind: v.kind,
      name: v.name,
      case: c,
      base: b,
      source: s,
      target: t,
      targetVersion: t === null ? null : (target.get(key)?.version ?? null),
      sourceAt: source.get(key)?.writtenAt ?? null,
      targetAt: target.get(key)?.writtenAt ?? null,
    };
    if (outcome === 'source') entry.decided = 'source';
    else {
      const reason = conflictReason(v.kind, v.name, c, s);
      entry.conflict = { id: '', ...(reason ? { reason } : {}) };
      const side = settle(strategy, change(source.get(key)), change(target.get(key)));
      if (side) entry.decided = side;
    }
    entries.set(key, entry);
  }

  const targetBodies = new Map([...target].flatMap(([k, v]) => (v.body ? [[k, v.body] as const] : [])));
  const document = schemaDocument(schema);
  for (;;) {
    const merged = new Map(targetBodies);
    const written = new Set<string>();
    for (const [key, e] of entries) {
      const body = finalBody(e);
      if (body === undefined || sameBody(body, e.target)) continue;
      written.add(key);
      if (body === null) merged.delete(key);
      else merged.set(key, body);
    }
    const found = faults(document, targetBodies, merged, written);
    if (found.size === 0) break;
    for (const [key, reason] of found) {
      const e = entries.get(key) as Entry;
      const was = e.conflict?.reason;
      e.conflict = { id: '', reason: was ? `${was}; ${reason}` : reason };
      if (strategy === 'MANUAL') delete e.decided;
      else e.decided = 'target';
    }
  }
  let n = 0;
  for (const e of entries.values()) if (e.conflict) e.conflict.id = `i-${++n}`;
  return [...entries.values()];
}

/** What the plan writes, per kind as the planned and applied events count them. */
export function counts(entries: Entry[], written: (e: Entry) => boolean = writes) {
  const n = { derived: 0, rules: 0, decisions: 0 };
  for (const e of entries) {
    if (!written(e)) continue;
    if (e.kind === 'derived') n.derived++;
    else if (e.kind === 'rule') n.rules++;
    else n.decisions++;
  }
  return n;
}

/** Whether the entry, as decided (and resolved), changes the target. */
export const writes = (e: Entry) => {
  const body = finalBody(e);
  return body !== undefined && !sameBody(body, e.target);
};

/** The three sides at the points. */
export async function readPoints(db: Queryable, points: Points) {
  const [base, source, target] = [
    points.base ? await definitionsAt(db, points.base.world, points.base.position) : new Map<string, Version>(),
    await definitionsAt(db, points.source.world, points.source.position),
    await definitionsAt(db, points.target.world, points.target.position),
  ];
  return { base, source, target };
}

import { canonicalJson } from '@onto/shared';

/*
 * The three-way classification of a merge (docs/adr/0037, 0038), pure: one object's states at
 * the base, in the source and in the target give the merged state and its conflicts, property by
 * property; a link's three states (live or not) give the merged one. No I/O, no strategy: the
 * conflicts are settled by `choose` and `resolveObject`.
 */

export type Properties = Record<string, unknown>;
/** An object's state at a point: its properties, or null when absent (never written, or deleted). */
export type State = Properties | null;

export type ConflictType = 'MODIFY_MODIFY' | 'MODIFY_DELETE' | 'SCHEMA_CONFLICT';

/** A conflict of one object: of one property (MODIFY_MODIFY) or of the whole object. */
export interface Found {
  type: ConflictType;
  property?: string;
  base: unknown;
  source: unknown;
  target: unknown;
  reason?: string;
}

export interface Classified {
  /** The merged state; a property (or object) in conflict holds the target's side until settled. */
  merged: State;
  conflicts: Found[];
}

const same = (a: unknown, b: unknown) => canonicalJson(a ?? null) === canonicalJson(b ?? null);
/** A property of a state, null when absent: one named like a prototype member (`constructor`) included. */
export const propertyOf = (s: State, name: string): unknown =>
  s === null || !Object.hasOwn(s, name) ? null : (s[name] ?? null);
/** Sets a property as plain data (`__proto__` too would be an own property, not the prototype). */
const setProperty = (o: Properties, name: string, value: unknown) =>
  Object.defineProperty(o, name, { value, writable: true, enumerable: true, configurable: true });

/**
 * The seven cases, per property: unchanged; changed in the source only → the source's; in the
 * target only → the target's; both alike → that; both differently → MODIFY_MODIFY on the
 * property. Added in the source → added; deleted in the source with the target unchanged →
 * deleted; changed on one side and deleted on the other → MODIFY_DELETE on the object. Added on
 * both sides compares per property against an empty base. Absent and null are the same value.
 */
export function classifyObject(base: State, source: State, target: State): Classified {
  if (same(source, base)) return { merged: target, conflicts: [] };
  if (same(target, base)) return { merged: source, conflicts: [] };
  if (same(source, target)) return { merged: target, conflicts: [] };
  if (source === null || target === null) {
    // One side deleted what the other changed (both absent would be the same state).
    return { merged: target, conflicts: [{ type: 'MODIFY_DELETE', base, source, target }] };
  }
  const merged: Properties = {};
  const conflicts: Found[] = [];
  const names = new Set([...Object.keys(base ?? {}), ...Object.keys(source), ...Object.keys(target)]);
  for (const name of [...names].sort()) {
    const b = propertyOf(base, name);
    const s = propertyOf(source, name);
    const t = propertyOf(target, name);
    let value = t;
    if (same(t, b)) value = s;
    else if (!same(s, b) && !same(s, t)) {
      conflicts.push({ type: 'MODIFY_MODIFY', property: name, base: b, source: s, target: t });
    }
    if (value !== null) setProperty(merged, name, value);
  }
  return { merged, conflicts };
}

/** A link: live or not at each point. Booleans cannot change two different ways. */
export function classifyLink(base: boolean, source: boolean, target: boolean): boolean {
  return source === base ? target : source;
}

/** How a conflict is settled: a side, or a given value (a property value, or a state for a whole object). */
export type Choice = { take: 'source' } | { take: 'target' } | { take: 'value'; value: unknown };

/** When a side last changed what conflicts: the write's instant (epoch µs) and its data seq. */
export interface ChangedAt {
  micros: number;
  seq: number;
}

export type Strategy = 'SOURCE_WINS' | 'TARGET_WINS' | 'TIMESTAMP_WINS' | 'MANUAL';

/**
 * The side a strategy settles a conflict with, or null (MANUAL: left to a person). TIMESTAMP_WINS
 * takes the side whose last change is newer; equal instants go to the change with the greater
 * data seq (unique: one global sequence), so the rule never ties.
 */
export function choose(strategy: Strategy, at?: { source: ChangedAt | null; target: ChangedAt | null }): Choice | null {
  switch (strategy) {
    case 'SOURCE_WINS':
      return { take: 'source' };
    case 'TARGET_WINS':
      return { take: 'target' };
    case 'MANUAL':
      return null;
    case 'TIMESTAMP_WINS':
      return { take: newer(at?.source ?? null, at?.target ?? null) };
  }
}

/** The side whose change is newer: by instant, then by data seq; a side with no change found loses. */
export function newer(source: ChangedAt | null, target: ChangedAt | null): 'source' | 'target' {
  if (source === null) return 'target';
  if (target === null) return 'source';
  if (source.micros !== target.micros) return source.micros > target.micros ? 'source' : 'target';
  return source.seq > target.seq ? 'source' : 'target';
}

/** A conflict of an object with how it is settled (null: open). */
export interface Settled {
  type: ConflictType;
  property?: string | undefined;
  choice: Choice | null;
}

/**
 * The merged object once its conflicts are settled: a property conflict sets that property (a
 * null value removes it); a whole-object conflict (MODIFY_DELETE, SCHEMA_CONFLICT) takes a whole
 * state and decides over the properties. An open conflict keeps the target's side.
 */
export function resolveObject(merged: State, source: State, target: State, conflicts: Settled[]): State {
  let out: State = merged === null ? null : { ...merged };
  for (const c of conflicts) {
    if (c.choice === null || c.property === undefined || out === null) continue;
    const value =
      c.choice.take === 'source'
        ? propertyOf(source, c.property)
        : c.choice.take === 'target'
          ? propertyOf(target, c.property)
          : c.choice.value;
    if (value === null || value === undefined) {
      if (Object.hasOwn(out, c.property)) delete out[c.property];
    } else setProperty(out, c.property, value);
  }
  // Whole-object decisions last: MODIFY_DELETE, then a schema conflict, which judged the result.
  for (const kind of ['MODIFY_DELETE', 'SCHEMA_CONFLICT'] as const) {
    for (const c of conflicts) {
      if (c.type !== kind || c.choice === null) continue;
      if (c.choice.take === 'source') out = source;
      else if (c.choice.take === 'target') out = target;
      else out = (c.choice.value ?? null) as State;
    }
  }
  return out;
}

/** Whether two states are the same content. */
export const sameState = (a: State, b: State) => same(a, b);

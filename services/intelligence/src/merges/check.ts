/**
 * Whether the definitions a merge writes hold together against the merged schema (pure): each
 * written definition must resolve, and nothing the target keeps may stop resolving because of
 * what the merge writes or removes (a decision definition whose rule the merge deletes).
 */
import type { SchemaDocument } from '@onto/shared';
import { compile } from '../cel/expressions.js';
import type { DecisionDefinition } from '../decisions/model.js';
import type { DerivedDefinition } from '../derived/model.js';
import { resolveWorld } from '../engine/world-model.js';
import type { Rule } from '../rules/model.js';
import { type Body, type Kind, keyOf } from './history.js';

const BOOKKEEPING = { version: 1, state: 'valid' as const, errors: [], schemaVersion: 0, createdAt: '', updatedAt: '' };

/** A schema document with every part present (control's may leave an empty one out). */
export const schemaDocument = (schema: Record<string, unknown>): SchemaDocument =>
  ({ objectTypes: {}, linkTypes: {}, actionTypes: {}, ...schema }) as SchemaDocument;

/** Bodies by keyOf as the three kinds' definitions, to resolve them together. */
function definitions(bodies: ReadonlyMap<string, Body>, worldId: string) {
  const derived: DerivedDefinition[] = [];
  const rules: Rule[] = [];
  const decisions: DecisionDefinition[] = [];
  for (const [key, body] of bodies) {
    const [kind, name] = split(key);
    const common = { ...BOOKKEEPING, worldId, name };
    if (kind === 'derived') derived.push({ ...(body as unknown as DerivedDefinition), ...common, validSince: '' });
    else if (kind === 'rule') rules.push({ ...(body as unknown as Rule), ...common });
    else decisions.push({ ...(body as unknown as DecisionDefinition), ...common });
  }
  return { derived, rules, decisions };
}

const split = (key: string): [Kind, string] => {
  const at = key.indexOf('/');
  return [key.slice(0, at) as Kind, key.slice(at + 1)];
};

/** The definitions a body reads, by keyOf (an alert type's decision: every rule raising it). */
export function readsOf(kind: Kind, body: Body, all: ReadonlyMap<string, Body>): Set<string> {
  const reads = new Set<string>();
  const derivedIn = (source: unknown, roots: ('self' | 'derived' | 'agg' | 'alert')[]) => {
    if (typeof source !== 'string') return;
    const compiled = compile(source, roots);
    if (compiled.ok) for (const d of compiled.refs.derived) reads.add(keyOf('derived', d));
  };
  if (kind === 'derived') {
    derivedIn(body.expression, ['self', 'derived', 'agg']);
    for (const a of Object.values((body.aggregates ?? {}) as Record<string, { derived?: string }>)) {
      if (a.derived) reads.add(keyOf('derived', a.derived));
    }
  } else if (kind === 'rule') {
    derivedIn(body.condition, ['self', 'derived']);
  } else {
    if (typeof body.rule === 'string') reads.add(keyOf('rule', body.rule));
    if (typeof body.alertType === 'string') {
      for (const [key, other] of all) if (key.startsWith('rule/') && other.alertType === body.alertType) reads.add(key);
    }
    for (const p of Object.values((body.parameters ?? {}) as Record<string, unknown>)) {
      derivedIn(p, ['self', 'derived', 'alert']);
    }
  }
  return reads;
}

/**
 * Why each written definition cannot be merged as planned, by keyOf: `written` are the keys the
 * merge writes (a key absent from `merged` is deleted); `target` and `merged` the target's
 * definitions before and after.
 */
export function faults(
  schema: SchemaDocument,
  target: ReadonlyMap<string, Body>,
  merged: ReadonlyMap<string, Body>,
  written: ReadonlySet<string>,
): Map<string, string> {
  const before = resolveWorld(schema, ...spread(definitions(target, '')));
  const after = resolveWorld(schema, ...spread(definitions(merged, '')));
  const validity = (r: typeof after, key: string) => {
    const [kind, name] = split(key);
    const map = kind === 'derived' ? r.derived : kind === 'rule' ? r.rules : r.decisions;
    return map.get(name);
  };
  const out = new Map<string, string>();
  const add = (key: string, reason: string) => out.set(key, out.has(key) ? `${out.get(key)}; ${reason}` : reason);
  for (const key of written) {
    if (!merged.has(key)) continue;
    const r = validity(after, key);
    if (r && !r.resolved) {
      const why = r.errors.map((e) => `${e.path} ${e.message}`).join('; ');
      add(key, `${split(key).join(' ')} does not hold against the merged schema and definitions: ${why}`);
    }
  }
  // What the target keeps and the merge breaks: the conflict is on what the merge writes that it reads.
  for (const [key, body] of merged) {
    if (written.has(key) || !validity(before, key)?.resolved || validity(after, key)?.resolved) continue;
    const [kind, name] = split(key);
    for (const read of readsOf(kind, body, new Map([...target, ...merged]))) {
      if (!written.has(read)) continue;
      add(
        read,
        `${kind} ${name} in the target reads ${split(read).join(' ')}, which the merge would ${merged.has(read) ? 'change' : 'remove'} so that it no longer holds`,
      );
    }
  }
  return out;
}

const spread = (d: ReturnType<typeof definitions>) => [d.derived, d.rules, d.decisions] as const;

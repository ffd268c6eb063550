/**
 * A proposal's required checks (docs/adr/0085): the rules the target's protection names, as the
 * merge would leave them (the target's definitions at the plan's position with the plan's writes),
 * evaluated on a dry run of the objects the merge would create or change — as data staged them,
 * a chunk at a time — and reported per rule with the objects it fired on. Nothing is written.
 */
import { type EventOf, ownValue, type Queryable, type SchemaDocument } from '@onto/shared';
import { compile, evaluateCondition, propertiesToCel } from '../cel/expressions.js';
import { schemaDocument } from './check.js';
import { type Body, definitionsAt } from './history.js';
import { finalBody } from './plan.js';
import { lockMerge, reply } from './store.js';

interface Result {
  rule: string;
  fired: { type: string; pk: string }[];
  error?: string;
}

/** The rule bodies the merge would leave in the target, by name. */
async function mergedRules(db: Queryable, m: NonNullable<Awaited<ReturnType<typeof lockMerge>>>) {
  const rules = new Map<string, Body>();
  for (const [key, v] of await definitionsAt(db, m.target, m.points.target.position)) {
    if (key.startsWith('rule/') && v.body) rules.set(v.name, v.body);
  }
  for (const e of m.entries) {
    if (e.kind !== 'rule') continue;
    const body = finalBody(e);
    // An open conflict leaves the target's side until resolved (a proposal has none open).
    if (body === undefined) continue;
    if (body === null) rules.delete(e.name);
    else rules.set(e.name, body);
  }
  return rules;
}

/** Evaluates each named rule on the chunk's objects; a rule that cannot be evaluated fails its check. */
export function evaluateChecks(
  checks: readonly string[],
  rules: ReadonlyMap<string, Body>,
  schema: SchemaDocument,
  objects: readonly { type: string; pk: string; properties: Record<string, unknown> }[],
): Result[] {
  return checks.map((name) => {
    const body = rules.get(name);
    if (!body) return { rule: name, fired: [], error: `rule ${name} is not in the target as the merge would leave it` };
    const compiled = compile(String(body.condition ?? ''), ['self', 'derived']);
    if (!compiled.ok) return { rule: name, fired: [], error: `the condition does not compile: ${compiled.message}` };
    if (compiled.refs.derived.size > 0) {
      return {
        rule: name,
        fired: [],
        error: `the condition reads derived properties (${[...compiled.refs.derived].join(', ')}), which a dry run does not compute`,
      };
    }
    const objectType = String(body.objectType ?? '');
    const types = ownValue(schema.objectTypes, objectType)?.properties;
    const fired: Result['fired'] = [];
    let error: string | undefined;
    for (const o of objects) {
      if (o.type !== objectType) continue;
      const outcome = evaluateCondition(compiled.program, { self: propertiesToCel(o.properties, types), derived: {} });
      if (outcome === true) fired.push({ type: o.type, pk: o.pk });
      else if (typeof outcome === 'object') error ??= `${o.type}/${o.pk}: ${outcome.error}`;
    }
    return { rule: name, fired, ...(error ? { error } : {}) };
  });
}

/** `world.merge.check.requested`: one chunk's checks, answered as intelligence.merge.checked. */
export async function check(
  tx: Queryable,
  topicPrefix: string,
  event: EventOf<'world.merge.check.requested'>,
): Promise<void> {
  const p = event.payload;
  const m = await lockMerge(tx, event.world_id, p.merge);
  const results: Result[] = m
    ? evaluateChecks(p.checks, await mergedRules(tx, m), schemaDocument(m.schema), p.objects)
    : p.checks.map((rule) => ({ rule, fired: [], error: `merge ${p.merge} was never planned in intelligence` }));
  await reply(tx, topicPrefix, event, 'intelligence.merge.checked', {
    merge: p.merge,
    chunk: p.chunk,
    chunks: p.chunks,
    results,
  });
}

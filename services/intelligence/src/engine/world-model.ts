/**
 * A world's evaluation model: its definitions resolved against its replicated schema, compiled,
 * ordered and indexed by what they read. Cached per world and rebuilt when the world's
 * definition revision or schema version moves.
 */
import {
  Conflict,
  type FieldError,
  type Queryable,
  type SchemaDocument,
  type SchemaReplica,
  type Statement,
} from '@onto/shared';
import type { DecisionDefinition, ResolvedDecision } from '../decisions/model.js';
import { resolveDecision } from '../decisions/model.js';
import { listDecisionDefinitions } from '../decisions/repository.js';
import {
  type AggregateSpec,
  type DerivedDefinition,
  derivedInputs,
  type ResolvedDerived,
  resolveDerived,
  topologicalOrder,
} from '../derived/model.js';
import { listDerived } from '../derived/repository.js';
import { type ResolvedRule, type Rule, resolveRule } from '../rules/model.js';
import { listRules } from '../rules/repository.js';

export interface AggregateUse {
  def: ResolvedDerived;
  spec: AggregateSpec;
}

export interface WorldModel {
  worldId: string;
  revision: number;
  schemaVersion: number;
  schema: SchemaDocument;
  /** Valid derived definitions, each after those it reads. */
  derived: ResolvedDerived[];
  derivedByName: Map<string, ResolvedDerived>;
  derivedByType: Map<string, ResolvedDerived[]>;
  /** Aggregates over objects of a type: who must recompute when one of them changes. */
  aggregatesOverType: Map<string, AggregateUse[]>;
  aggregatesByLink: Map<string, AggregateUse[]>;
  /** Definitions reading windows of a series, by object type and series. */
  seriesReaders: Map<string, ResolvedDerived[]>;
  rules: Map<string, ResolvedRule>;
  rulesByType: Map<string, ResolvedRule[]>;
  decisionsByRule: Map<string, ResolvedDecision[]>;
  decisionsByAlertType: Map<string, ResolvedDecision[]>;
}

type Validity<R> = { resolved?: R; errors: FieldError[] };

export interface WorldResolution {
  derived: Map<string, Validity<ResolvedDerived>>;
  rules: Map<string, Validity<ResolvedRule>>;
  decisions: Map<string, Validity<ResolvedDecision>>;
}

/**
 * Resolves every definition of a world against `schema`, from scratch: a definition is valid when
 * what it reads is in the schema and every definition it reads is valid (to a fixpoint).
 */
export function resolveWorld(
  schema: SchemaDocument,
  derived: DerivedDefinition[],
  rules: Rule[],
  decisions: DecisionDefinition[],
): WorldResolution {
  const states = new Map(
    derived.map((d) => [d.name, { objectType: d.objectType, state: 'valid' as 'valid' | 'invalid' }]),
  );
  let results = new Map<string, Validity<ResolvedDerived>>();
  for (let changed = true; changed; ) {
    changed = false;
    results = new Map();
    for (const d of derived) {
      const r = resolveDerived(d.name, d, { version: d.version, validSince: d.validSince }, schema, states);
      results.set(d.name, r);
      const state = states.get(d.name);
      if (!r.resolved && state?.state === 'valid') {
        state.state = 'invalid';
        changed = true;
      }
    }
  }
  const resolved = [...results.values()].flatMap((r) => (r.resolved ? [r.resolved] : []));
  const ordered = topologicalOrder(resolved, derivedInputs);
  if ('cycle' in ordered) {
    for (const name of ordered.cycle) {
      results.set(name, { errors: [{ path: '/expression', message: `cycle ${ordered.cycle.join(' → ')}` }] });
      const state = states.get(name);
      if (state) state.state = 'invalid';
    }
  }
  const ruleResults = new Map<string, Validity<ResolvedRule>>();
  for (const r of rules) ruleResults.set(r.name, resolveRule(r.name, r, r.version, schema, states));
  const ruleStates = new Map(
    rules.map((r) => [
      r.name,
      {
        objectType: r.objectType,
        alertType: r.alertType,
        state: (ruleResults.get(r.name)?.resolved ? 'valid' : 'invalid') as 'valid' | 'invalid',
      },
    ]),
  );
  const decisionResults = new Map<string, Validity<ResolvedDecision>>();
  for (const d of decisions) {
    decisionResults.set(d.name, resolveDecision(d.name, d, d.version, schema, ruleStates, states));
  }
  return { derived: results, rules: ruleResults, decisions: decisionResults };
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V) {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Indexes what is valid both as stored and against the schema now. */
export function buildModel(
  worldId: string,
  revision: number,
  schemaVersion: number,
  schema: SchemaDocument,
  rows: { derived: DerivedDefinition[]; rules: Rule[]; decisions: DecisionDefinition[] },
): WorldModel {
  // Stored invalid definitions stay out even if they would resolve: only the schema handler
  // (or a new PUT) makes them valid again, and it recomputes their values when it does.
  const resolution = resolveWorld(
    schema,
    rows.derived.filter((d) => d.state === 'valid'),
    rows.rules.filter((r) => r.state === 'valid'),
    rows.decisions.filter((d) => d.state === 'valid'),
  );
  const valid = [...resolution.derived.values()].flatMap((r) => (r.resolved ? [r.resolved] : []));
  const ordered = topologicalOrder(valid, derivedInputs);
  const derived = 'order' in ordered ? ordered.order : [];
  const model: WorldModel = {
    worldId,
    revision,
    schemaVersion,
    schema,
    derived,
    derivedByName: new Map(derived.map((d) => [d.name, d])),
    derivedByType: new Map(),
    aggregatesOverType: new Map(),
    aggregatesByLink: new Map(),
    seriesReaders: new Map(),
    rules: new Map(),
    rulesByType: new Map(),
    decisionsByRule: new Map(),
    decisionsByAlertType: new Map(),
  };
  for (const def of derived) {
    push(model.derivedByType, def.objectType, def);
    for (const spec of def.aggregates) {
      if (spec.series !== undefined) {
        push(model.seriesReaders, `${def.objectType}\u0000${spec.series}`, def);
        continue;
      }
      push(model.aggregatesOverType, spec.targetType, { def, spec });
      push(model.aggregatesByLink, spec.linkType, { def, spec });
    }
  }
  for (const r of resolution.rules.values()) {
    if (!r.resolved) continue;
    model.rules.set(r.resolved.name, r.resolved);
    push(model.rulesByType, r.resolved.objectType, r.resolved);
  }
  for (const d of resolution.decisions.values()) {
    const decision = d.resolved;
    if (!decision) continue;
    if (decision.rule !== undefined) push(model.decisionsByRule, decision.rule, decision);
    else if (decision.alertType !== undefined) push(model.decisionsByAlertType, decision.alertType, decision);
  }
  return model;
}

/** Models of the worlds this process evaluates, checked against the database on every use. */
export class ModelCache {
  private readonly models = new Map<string, WorldModel>();

  constructor(
    private readonly replica: SchemaReplica,
    private readonly maxCached = 1000,
  ) {}

  /**
   * What decides whether a cached model is current: the world's definition revision and schema
   * version. A statement, so that callers can send it with others (after the world's lock).
   */
  static versions(worldId: string): Statement {
    return {
      text: `SELECT coalesce((SELECT revision FROM definition_revisions WHERE world_id = $1), 0) AS revision,
                    coalesce((SELECT max(version) FROM schema_versions WHERE world_id = $1), 0) AS schema_version,
                    EXISTS (SELECT 1 FROM world_bases WHERE world_id = $1) AS based,
                    EXISTS (SELECT 1 FROM worlds WHERE id = $1 AND reads_through AND parent_world IS NOT NULL)
                      AS forked`,
      values: [worldId],
    };
  }

  /**
   * Whether the world reads through a chain (`versions`' answer): `pending` while it is a fork
   * whose commit intelligence has not recorded yet (docs/adr/0033).
   */
  static chainOf(read: Record<string, unknown>[] | undefined): 'none' | 'known' | 'pending' {
    const row = read?.[0] as { based?: boolean; forked?: boolean } | undefined;
    if (row?.based) return 'known';
    return row?.forked ? 'pending' : 'none';
  }

  /**
   * The world's model as of the caller's transaction (which should hold the world's lock); `read`
   * is the answer to `versions(worldId)` when the caller already has it.
   */
  async get(db: Queryable, worldId: string, read?: Record<string, unknown>[]): Promise<WorldModel> {
    const { text, values } = ModelCache.versions(worldId);
    const rows = (read ?? (await db.query(text, values as unknown[])).rows) as {
      revision: string | number;
      schema_version: number;
    }[];
    const revision = Number(rows[0]?.revision ?? 0);
    const schemaVersion = rows[0]?.schema_version ?? 0;
    const hit = this.models.get(worldId);
    if (hit && hit.revision === revision && hit.schemaVersion === schemaVersion) return hit;
    const definitions = await definitionsOf(db, worldId);
    const schema = await this.replica.document(db, worldId, schemaVersion);
    const model = buildModel(worldId, revision, schemaVersion, schema, definitions);
    this.models.delete(worldId);
    this.models.set(worldId, model);
    if (this.models.size > this.maxCached) this.models.delete(this.models.keys().next().value as string);
    return model;
  }
}

export interface Definitions {
  derived: DerivedDefinition[];
  rules: Rule[];
  decisions: DecisionDefinition[];
}

/** A world's definitions of every kind; the kinds in `known` are not read again. */
export async function definitionsOf(
  db: Queryable,
  worldId: string,
  known: Partial<Definitions> = {},
): Promise<Definitions> {
  // One client: its queries one after the other.
  const derived = known.derived ?? (await listDerived(db, worldId));
  const rules = known.rules ?? (await listRules(db, worldId));
  const decisions = known.decisions ?? (await listDecisionDefinitions(db, worldId));
  return { derived, rules, decisions };
}

/**
 * What a change of definitions would break: the definitions stored valid that resolve with
 * `before` and no longer with `after` (a deleted definition is not its own casualty).
 */
export function invalidatedBy(schema: SchemaDocument, before: Definitions, after: Definitions): string[] {
  const valid = (d: Definitions): Definitions => ({
    derived: d.derived.filter((x) => x.state === 'valid'),
    rules: d.rules.filter((x) => x.state === 'valid'),
    decisions: d.decisions.filter((x) => x.state === 'valid'),
  });
  const resolve = (d: Definitions) => resolveWorld(schema, d.derived, d.rules, d.decisions);
  const was = resolve(valid(before));
  const now = resolve(valid(after));
  const broken: string[] = [];
  const compare = <R>(label: string, a: Map<string, Validity<R>>, b: Map<string, Validity<R>>) => {
    for (const [name, r] of b) {
      if (!r.resolved && a.get(name)?.resolved) {
        broken.push(`${label} ${name} (${r.errors.map((e) => `${e.path} ${e.message}`).join('; ')})`);
      }
    }
  };
  compare('derived property', was.derived, now.derived);
  compare('rule', was.rules, now.rules);
  compare('decision definition', was.decisions, now.decisions);
  return broken;
}

/** A 409 naming what the change would break (see invalidatedBy); `message` tells the change and its casualties. */
export function refuseToBreak(
  schema: SchemaDocument,
  before: Definitions,
  after: Definitions,
  message: (broken: string) => string,
): void {
  const broken = invalidatedBy(schema, before, after);
  if (broken.length > 0) throw new Conflict(message(broken.join('; ')), { invalidates: broken });
}

/**
 * What a schema change does to a world's definitions (consistency design §11): once data has
 * applied a schema version (`storage.schema.updated`), every definition is checked again against
 * it. Definitions that no longer resolve are marked invalid (and no longer evaluated, their values
 * shown stale); those that resolve again, or whose inputs' types changed, are recomputed.
 */
import {
  type ApplyEffects,
  type FieldError,
  isEvent,
  ownValue,
  type Queryable,
  type SchemaDocument,
  type SchemaReplica,
  storeSchemaVersion,
} from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import { compile } from '../cel/expressions.js';
import { saveDecisionDefinition } from '../decisions/repository.js';
import { schemaFootprint } from '../derived/model.js';
import { saveDerived } from '../derived/repository.js';
import { recordHorizon, recordRetentionFacts } from '../readmodel/retention.js';
import type { Rule } from '../rules/model.js';
import { saveRule } from '../rules/repository.js';
import { bumpRevision, lockWorlds } from './locks.js';
import { finishRecomputes, requestRecompute } from './recompute-jobs.js';
import { definitionsOf, resolveWorld } from './world-model.js';

function ruleFootprint(rule: Rule, schema: SchemaDocument): string {
  const compiled = compile(rule.condition, ['self', 'derived']);
  const type = ownValue(schema.objectTypes, rule.objectType);
  const props = compiled.ok ? [...compiled.refs.self].sort() : [];
  return JSON.stringify({
    type: type ? rule.objectType : null,
    props: props.map((p) => (type ? ownValue(type.properties, p)?.type : undefined) ?? null),
  });
}

export interface RevalidationReport {
  invalidated: string[];
  revalidated: string[];
  recomputed: string[];
}

/** Checks every definition of the world against its applied schema; in the caller's transaction, under the world's lock. */
export async function revalidateWorld(
  tx: Queryable,
  replica: SchemaReplica,
  worldId: string,
): Promise<RevalidationReport> {
  const { version, document } = await replica.current(tx, worldId);
  const { derived, rules, decisions } = await definitionsOf(tx, worldId);
  const report: RevalidationReport = { invalidated: [], revalidated: [], recomputed: [] };
  if (derived.length + rules.length + decisions.length === 0) return report;
  const resolution = resolveWorld(document, derived, rules, decisions);
  const documents = new Map<number, SchemaDocument>([[version, document]]);
  // A fork's copies say schema version 0 until checked here; they were checked against their
  // base's schema, which is what to compare with: a fork whose schema is its base's recomputes
  // nothing (its inherited values stay the base's, docs/adr/0033) — else every fork would
  // re-evaluate every inherited object of its base, O(base).
  const { rows: parents } = await tx.query<{ parent: string | null }>(
    'SELECT parent_world AS parent FROM worlds WHERE id = $1',
    [worldId],
  );
  const parent = parents[0]?.parent;
  if (parent) documents.set(0, (await replica.current(tx, parent)).document);
  const documentAt = async (v: number) => {
    let doc = documents.get(v);
    if (!doc) {
      doc = await replica.document(tx, worldId, v);
      documents.set(v, doc);
    }
    return doc;
  };
  /** A definition's bookkeeping as checked against the new schema. */
  const checkedAt = (valid: boolean, r: { errors: FieldError[] } | undefined) => ({
    state: valid ? ('valid' as const) : ('invalid' as const),
    errors: r?.errors ?? [],
    schemaVersion: version,
  });
  /** Notes how a definition's state moved under the new schema. */
  const note = (label: string, was: 'valid' | 'invalid', valid: boolean, recompute: boolean) => {
    if (was === 'valid' && !valid) report.invalidated.push(label);
    if (was === 'invalid' && valid) report.revalidated.push(label);
    if (recompute) report.recomputed.push(label);
  };
  /** Asks for a valid definition's evaluation over existing objects again, or ends an invalid one's. */
  const reevaluate = async (
    kind: 'derived' | 'rule',
    def: { name: string; version: number; objectType: string },
    valid: boolean,
    recompute: boolean,
    dueInMs: number,
  ) => {
    if (recompute) {
      await requestRecompute(tx, {
        worldId,
        kind,
        name: def.name,
        definitionVersion: def.version,
        objectType: def.objectType,
        dueInMs,
      });
    } else if (!valid) {
      await finishRecomputes(tx, worldId, kind, def.name);
    }
  };

  for (const d of derived) {
    const r = resolution.derived.get(d.name);
    const valid = r?.resolved !== undefined;
    const refs = compile(d.expression, ['self', 'derived', 'agg']);
    const self = refs.ok ? refs.refs.self : new Set<string>();
    const before = schemaFootprint(d, { self }, await documentAt(d.schemaVersion));
    const after = schemaFootprint(d, { self }, document);
    const recompute = valid && (d.state === 'invalid' || before !== after);
    note(d.name, d.state, valid, recompute);
    await saveDerived(tx, { ...d, ...checkedAt(valid, r), invalidateValues: recompute });
    await reevaluate('derived', d, valid, recompute, d.maxStalenessMs);
  }
  for (const rule of rules) {
    const r = resolution.rules.get(rule.name);
    const valid = r?.resolved !== undefined;
    const changed = ruleFootprint(rule, await documentAt(rule.schemaVersion)) !== ruleFootprint(rule, document);
    const recompute = valid && (rule.state === 'invalid' || changed);
    note(`rule:${rule.name}`, rule.state, valid, recompute);
    await saveRule(tx, { ...rule, ...checkedAt(valid, r) });
    await reevaluate('rule', rule, valid, recompute, 0);
  }
  for (const d of decisions) {
    const r = resolution.decisions.get(d.name);
    const valid = r?.resolved !== undefined;
    note(`decision:${d.name}`, d.state, valid, false);
    await saveDecisionDefinition(tx, { ...d, ...checkedAt(valid, r) });
  }
  await bumpRevision(tx, worldId);
  return report;
}

// Everything this part of intelligence keeps per world.
const WORLD_TABLES = [
  'rm_objects',
  'rm_links',
  'rm_series_points',
  'rm_objects_history',
  'rm_links_history',
  'derived_values',
  'derived_values_history',
  'world_bases',
  'derived_definitions',
  'recompute_jobs',
  'alerts',
  'rules',
  'decisions',
  'decision_definitions',
  'definition_revisions',
  'definition_history',
  'fork_points',
  'world_tags',
  'world_horizons',
  'rm_commit_times',
  'data_world_starts',
  'decisions_history',
  'world_retention',
  'history_pins',
  'data_merges',
];

/** Forgets a dropped world: its read model, definitions, values, alerts and decisions. */
export async function dropWorld(tx: Queryable, worldId: string): Promise<void> {
  for (const table of WORLD_TABLES) await tx.query(`DELETE FROM ${table} WHERE world_id = $1`, [worldId]);
}

const DROPS = new Set(['world.deleted', 'world.drop.requested']);
/** What retention in intelligence learns besides the horizon: keepVersions, and data's merges (docs/adr/0077). */
const RETENTION_FACTS = new Set([
  'world.retention.updated',
  'world.merge.requested',
  'merge.planned',
  'merge.applied',
  'merge.compensated',
]);

/**
 * A fork's base and the commit data forked it at (`world.provisioned {base}`): from here on its
 * reads and its evaluation read the base's read model as of that commit (docs/adr/0033). Data's
 * reply is the one place the commit is decided (a ref "now" or an instant resolves in data's inbox
 * transaction), so intelligence takes it from there rather than resolve it itself.
 */
async function recordBase(tx: Queryable, worldId: string, payload: Record<string, unknown>) {
  // The world's first commit in data and when it was provisioned there (docs/adr/0069).
  const created = payload.created as { commit: number; at: string } | undefined;
  if (created) {
    await tx.query(
      `INSERT INTO data_world_starts (world_id, created_seq, created_at) VALUES ($1, $2, $3)
       ON CONFLICT (world_id) DO NOTHING`,
      [worldId, created.commit, created.at],
    );
  }
  const base = payload.base as { world: string; commit: number } | undefined;
  if (!base) return;
  await tx.query(
    `INSERT INTO world_bases (world_id, base_world, base_seq) VALUES ($1, $2, $3) ON CONFLICT (world_id) DO NOTHING`,
    [worldId, base.world, base.commit],
  );
}

/**
 * A tag's commit from data's reply (docs/adr/0046; the row's other half is written by the
 * intelligence-worlds consumer, in either order): for the newest request of the name only — an
 * older request's reply changes nothing, a newer one replaces the row (the tag was made again).
 */
async function recordTagCommit(tx: Queryable, worldId: string, payload: Record<string, unknown>) {
  await tx.query(
    `INSERT INTO world_tags (world_id, name, request_id, commit, written) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (world_id, name) DO UPDATE
       SET request_id = EXCLUDED.request_id, commit = EXCLUDED.commit, written = EXCLUDED.written,
           definitions = CASE WHEN world_tags.request_id = EXCLUDED.request_id THEN world_tags.definitions END,
           moment = CASE WHEN world_tags.request_id = EXCLUDED.request_id THEN world_tags.moment END,
           deleted = world_tags.deleted AND world_tags.request_id = EXCLUDED.request_id
     WHERE world_tags.request_id <= EXCLUDED.request_id`,
    [worldId, payload.tag, payload.request, payload.commit, payload.written ?? null],
  );
}

/**
 * Consumer `intelligence-definitions` on onto.schema, onto.storage and onto.worlds: schema
 * changes revalidate a world's definitions, a dropped world is forgotten. It stores schema
 * versions itself (idempotently, beside the schema replica's consumer) so that
 * `storage.schema.updated`, caused by `schema.updated`, finds its cause in this consumer's own
 * inbox and is never parked; data's replies to onto.worlds events travel on onto.storage, which
 * is one more reason to record those here.
 */
export function applySchemaChanges(
  replica: SchemaReplica,
  log: FastifyBaseLogger,
  hooks: { wake: () => void; dropped: (worldId: string) => void },
): ApplyEffects {
  return async (tx, events) => {
    let revalidated = false;
    // Every world of the batch locked at once, in the one order all lockers use.
    await lockWorlds(
      tx,
      events
        .filter((e) => e.event.type === 'storage.schema.updated' || DROPS.has(e.event.type))
        .map((e) => e.event.world_id),
    );
    for (const { event } of events) {
      if (event.type === 'schema.updated') {
        await storeSchemaVersion(tx, event);
      } else if (event.type === 'storage.schema.updated') {
        const report = await revalidateWorld(tx, replica, event.world_id);
        revalidated = true;
        if (report.invalidated.length + report.revalidated.length + report.recomputed.length > 0) {
          log.info({ worldId: event.world_id, ...report }, 'definitions checked against the new schema');
        }
      } else if (event.type === 'world.provisioned') {
        await recordBase(tx, event.world_id, event.payload);
      } else if (event.type === 'world.tag.positioned') {
        await recordTagCommit(tx, event.world_id, event.payload);
      } else if (isEvent(event, 'storage.history.horizon')) {
        await recordHorizon(tx, event.world_id, event.payload.horizon);
      } else if (RETENTION_FACTS.has(event.type)) {
        await recordRetentionFacts(tx, event);
      } else if (DROPS.has(event.type)) {
        await dropWorld(tx, event.world_id);
        hooks.dropped(event.world_id);
      }
    }
    // The jobs are visible once this commits; the worker's poll finds them, a wake is sooner.
    if (revalidated) setTimeout(hooks.wake, 50).unref();
  };
}

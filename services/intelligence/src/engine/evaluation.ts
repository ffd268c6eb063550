/**
 * One world's recompute inside one transaction (docs/adr/0010). Callers say what changed —
 * objects (which properties), links, or a definition that needs values for some objects — and
 * `run` recomputes exactly the derived values that read it, definition by definition in
 * dependency order, following changed values to their dependents on the same object and across
 * links; then evaluates the rules whose inputs changed, raising and clearing alerts, and makes
 * the decisions raised alerts call for. Everything is written through the caller's transaction.
 */
import { canonicalJson, ownValue, type Statement, setOwn } from '@onto/shared';
import { evaluationSlices } from '../cel/budget.js';
import {
  type Bindings,
  derivedToCel,
  evaluate,
  evaluateCondition,
  type Outcome,
  propertiesToCel,
} from '../cel/expressions.js';
import { type ActionStarter, makeDecisions } from '../decisions/make.js';
import type { AggregateSpec, ResolvedDerived } from '../derived/model.js';
import { type Alert, clearAlerts, type NewAlert, openAlerts, raiseAlerts } from '../rules/alerts.js';
import type { AggregateUse, WorldModel } from './world-model.js';
import type { WriteBehind } from './write-behind.js';

interface DerivedState {
  value: unknown;
  kind: string | null;
  error: { message: string } | null;
  sourceSeq: number;
}

interface ObjectState {
  pk: string;
  version: number;
  seq: number;
  properties: Record<string, unknown>;
  derived: Map<string, DerivedState>;
}

export interface EvaluationContext {
  topicPrefix: string;
  actions: ActionStarter | undefined;
}

export interface EvaluationStats {
  /** Derived values computed and stored. */
  values: number;
  /** … of which changed (value or error). */
  changed: number;
  raised: number;
  cleared: number;
  decisions: number;
  ruleErrors: number;
  /** Definitions that recomputed at least one value. */
  definitions: Set<string>;
}

const keyOf = (type: string, pk: string) => `${type}\u0000${pk}`;
const intersects = (a: ReadonlySet<string>, b: ReadonlySet<string>) => {
  for (const x of a) if (b.has(x)) return true;
  return false;
};

function add<K>(map: Map<K, Set<string>>, key: K, pk: string) {
  const set = map.get(key);
  if (set) set.add(pk);
  else map.set(key, new Set([pk]));
}

const sameState = (a: DerivedState, b: DerivedState) =>
  a.kind === b.kind &&
  (a.error?.message ?? null) === (b.error?.message ?? null) &&
  canonicalJson(a.value ?? null) === canonicalJson(b.value ?? null);

/** A number PostgreSQL printed, as a CEL int when it is whole and ints were asked for. */
function numberOf(text: string, int: boolean): bigint | number {
  if (int) {
    const whole = /^(-?\d+)(?:\.0*)?$/.exec(text);
    if (whole?.[1]) return BigInt(whole[1]);
  }
  return Number(text);
}

/** An object as stored, with its derived values, as `load` reads it. */
export interface StoredObject {
  pk: string;
  version: string | number;
  seq: string | number;
  properties: Record<string, unknown>;
  derived: [string, unknown, string | null, { message: string } | null, string | number][] | null;
}

function objectState(r: StoredObject): ObjectState {
  const derived = new Map<string, DerivedState>();
  for (const [name, value, kind, error, sourceSeq] of r.derived ?? []) {
    derived.set(name, { value, kind, error, sourceSeq: Number(sourceSeq) });
  }
  return { pk: r.pk, version: Number(r.version), seq: Number(r.seq), properties: r.properties, derived };
}

interface AggregateRow {
  pk: string;
  n: number;
  seq: string | null;
  v: string | number | null;
  ints: boolean;
}

export class Evaluation {
  private readonly dirty = new Map<string, Set<string>>();
  private readonly ruleDirty = new Map<string, Set<string>>();
  /** Per definition and aggregate: far-end objects whose change the near ends must see. */
  private readonly linked = new Map<string, Map<AggregateSpec, Set<string>>>();
  private readonly objects = new Map<string, ObjectState | null>();
  private readonly deleted = new Map<string, Map<string, number>>();
  /** The data change event behind an object's recompute, for the alerts it raises or clears. */
  private readonly causes = new Map<string, string>();
  readonly stats: EvaluationStats = {
    values: 0,
    changed: 0,
    raised: 0,
    cleared: 0,
    decisions: 0,
    ruleErrors: 0,
    definitions: new Set(),
  };

  /**
   * Its reads go out with the writes held back before them; its own writes (derived values) are
   * held back, so that the last of them travel with whatever the caller sends next.
   */
  constructor(
    private readonly sql: WriteBehind,
    private readonly model: WorldModel,
    private readonly ctx: EvaluationContext,
    /**
     * The world is a fork with its base recorded: objects, links and values it has not written
     * are read through the chain, its bases' as of the fork points (docs/adr/0033). Its writes
     * are its own rows, as in any world.
     */
    private readonly forked = false,
  ) {}

  private get world() {
    return this.model.worldId;
  }

  private cause(type: string, pk: string, eventId: string | undefined) {
    if (eventId) this.causes.set(keyOf(type, pk), eventId);
  }

  private markLinked(use: AggregateUse, farPk: string) {
    let specs = this.linked.get(use.def.name);
    if (!specs) {
      specs = new Map();
      this.linked.set(use.def.name, specs);
    }
    add(specs, use.spec, farPk);
  }

  /** An object was created (`all`) or some of its properties changed. */
  objectChanged(type: string, pk: string, changed: ReadonlySet<string> | 'all', eventId?: string) {
    this.cause(type, pk, eventId);
    for (const def of this.model.derivedByType.get(type) ?? []) {
      if (changed === 'all' || intersects(def.ownProperties, changed)) add(this.dirty, def.name, pk);
    }
    for (const rule of this.model.rulesByType.get(type) ?? []) {
      if (changed === 'all' || intersects(rule.ownProperties, changed)) add(this.ruleDirty, rule.name, pk);
    }
    for (const use of this.model.aggregatesOverType.get(type) ?? []) {
      if (changed === 'all' || (use.spec.property !== undefined && changed.has(use.spec.property))) {
        this.markLinked(use, pk);
      }
    }
  }

  /** Points of an object's series arrived: the definitions reading windows of it recompute. */
  seriesChanged(type: string, pk: string, series: string, eventId?: string) {
    this.cause(type, pk, eventId);
    for (const def of this.model.seriesReaders.get(`${type}\u0000${series}`) ?? []) add(this.dirty, def.name, pk);
  }

  /** A live object was deleted: its values go, its alerts clear, aggregates over it change. */
  objectDeleted(type: string, pk: string, version: number, eventId?: string) {
    this.cause(type, pk, eventId);
    let pks = this.deleted.get(type);
    if (!pks) {
      pks = new Map();
      this.deleted.set(type, pks);
    }
    pks.set(pk, version);
    for (const use of this.model.aggregatesOverType.get(type) ?? []) this.markLinked(use, pk);
  }

  /** A link appeared or disappeared: the aggregates along its type change at the near end. */
  linkChanged(linkType: string, fromPk: string, toPk: string, eventId?: string) {
    for (const { def, spec } of this.model.aggregatesByLink.get(linkType) ?? []) {
      const near = spec.direction === 'out' ? fromPk : toPk;
      add(this.dirty, def.name, near);
      this.cause(def.objectType, near, eventId);
    }
  }

  /**
   * Objects of `type` the caller read in this transaction, after its last change to them: live
   * ones with their derived values, `null` for deleted or absent ones. `load` will not read them.
   */
  know(type: string, objects: Map<string, StoredObject | null>) {
    for (const [pk, stored] of objects) this.objects.set(keyOf(type, pk), stored ? objectState(stored) : null);
  }

  /** A definition needs values for these objects (a new definition, a schema change). */
  definitionNeeds(name: string, pks: string[]) {
    for (const pk of pks) add(this.dirty, name, pk);
  }

  /** A rule must be evaluated for these objects (a new or changed rule). */
  ruleNeeds(name: string, pks: string[]) {
    for (const pk of pks) add(this.ruleDirty, name, pk);
  }

  async run(): Promise<EvaluationStats> {
    await this.applyDeletions();
    for (const def of this.model.derived) {
      await this.expandLinked(def);
      const pks = this.dirty.get(def.name);
      if (!pks || pks.size === 0) continue;
      this.dirty.delete(def.name);
      await this.recompute(def, [...pks]);
    }
    await this.evaluateRules();
    return this.stats;
  }

  private async applyDeletions() {
    const clears: { id: string; objectVersion: number | null; cause?: string | undefined }[] = [];
    for (const [type, pks] of this.deleted) {
      const list = [...pks.keys()];
      this.sql.write(
        `WITH gone AS (
           DELETE FROM derived_values d USING unnest($3::text[]) AS k(pk)
            WHERE d.world_id = $1 AND d.object_type = $2 AND d.pk = k.pk
           RETURNING d.*
         )
         INSERT INTO derived_values_history (world_id, object_type, pk, name, value, value_kind, error, computed_at,
                                             definition_version, source_version, source_seq, sources, valid_seq,
                                             superseded_seq)
         SELECT world_id, object_type, pk, name, value, value_kind, error, computed_at, definition_version,
                source_version, source_seq, sources, valid_seq, rm_world_seq($1)
           FROM gone WHERE valid_seq < rm_world_seq($1)`,
        [this.world, type, list],
      );
      for (const open of await openAlerts(this.sql, this.world, type, list)) {
        clears.push({
          id: open.id,
          objectVersion: pks.get(open.pk) ?? null,
          cause: this.causes.get(keyOf(type, open.pk)),
        });
      }
    }
    if (clears.length === 0) return;
    this.stats.cleared += (
      await clearAlerts(await this.sql.direct(), this.world, clears, 'object deleted', this.ctx.topicPrefix)
    ).length;
  }

  /** Turns far-end changes into near-end objects to recompute, through the live links. */
  private async expandLinked(def: ResolvedDerived) {
    const specs = this.linked.get(def.name);
    if (!specs) return;
    this.linked.delete(def.name);
    for (const [spec, farPks] of specs) {
      const [near, far] = spec.direction === 'out' ? ['from_pk', 'to_pk'] : ['to_pk', 'from_pk'];
      // In a fork, the links at the far end through the chain (rm_links_in_at finds them by `to`).
      const atFar = spec.direction === 'out' ? 'rm_links_in_at' : 'rm_links_out_at';
      const { rows } = await this.sql.query<{ near: string; far: string }>(
        this.forked
          ? `SELECT l.${near} AS near, k.pk AS far FROM unnest($3::text[]) AS k(pk)
               CROSS JOIN LATERAL (SELECT * FROM ${atFar}($1, $2, k.pk) WHERE NOT deleted) l`
          : `SELECT l.near, k.pk AS far FROM unnest($3::text[]) AS k(pk)
           CROSS JOIN LATERAL (SELECT ${near} AS near FROM rm_links
                                WHERE world_id = $1 AND link_type = $2 AND ${far} = k.pk AND NOT deleted OFFSET 0) l`,
        [this.world, spec.linkType, [...farPks]],
      );
      for (const r of rows) {
        add(this.dirty, def.name, r.near);
        const cause = this.causes.get(keyOf(spec.targetType, r.far));
        if (cause && !this.causes.has(keyOf(def.objectType, r.near))) this.cause(def.objectType, r.near, cause);
      }
    }
  }

  /** Reads objects (with their derived values) not read yet in this evaluation. */
  private async load(type: string, pks: string[]) {
    const missing = this.missing(type, pks);
    if (missing.length === 0) return;
    const [answer] = await this.sql.queryAll([this.loadStatement(type, missing)]);
    this.remember(type, missing, answer?.rows ?? []);
  }

  private missing(type: string, pks: string[]): string[] {
    return pks.filter((pk) => !this.objects.has(keyOf(type, pk)));
  }

  private loadStatement(type: string, missing: string[]): Statement {
    if (this.forked) {
      return {
        text: `SELECT k.pk, o.version, o.seq, o.properties,
                (SELECT jsonb_agg(jsonb_build_array(d.name, d.value, d.value_kind, d.error, d.source_seq))
                   FROM rm_derived_at($1, $2, k.pk) d) AS derived
           FROM unnest($3::text[]) AS k(pk)
          CROSS JOIN LATERAL (SELECT version, seq, properties FROM rm_object_at($1, $2, k.pk) WHERE NOT deleted) o`,
        values: [this.world, type, missing],
      };
    }
    return {
      text: `SELECT o.pk, o.version, o.seq, o.properties,
              (SELECT jsonb_agg(jsonb_build_array(d.name, d.value, d.value_kind, d.error, d.source_seq))
                 FROM derived_values d
                WHERE d.world_id = $1 AND d.object_type = $2 AND d.pk = o.pk) AS derived
         FROM unnest($3::text[]) AS k(pk)
        CROSS JOIN LATERAL (SELECT pk, version, seq, properties FROM rm_objects
                             WHERE world_id = $1 AND type = $2 AND pk = k.pk AND NOT deleted OFFSET 0) o`,
      values: [this.world, type, missing],
    };
  }

  /** Records what a load statement answered: the live objects, and the others as absent. */
  private remember(type: string, missing: string[], rows: Record<string, unknown>[]) {
    for (const pk of missing) this.objects.set(keyOf(type, pk), null);
    for (const r of rows as unknown as StoredObject[]) this.objects.set(keyOf(type, r.pk), objectState(r));
  }

  private live(type: string, pks: Iterable<string>): ObjectState[] {
    const out: ObjectState[] = [];
    for (const pk of pks) {
      const o = this.objects.get(keyOf(type, pk));
      if (o) out.push(o);
    }
    return out;
  }

  /** `derived` as an expression sees it: the named values that have one (no error). */
  private derivedBinding(obj: ObjectState, names: Iterable<string>) {
    const binding: Record<string, unknown> = {};
    const missing: string[] = [];
    for (const name of names) {
      const d = obj.derived.get(name);
      if (d && d.error === null) setOwn(binding, name, derivedToCel(d.value, d.kind));
      else missing.push(name);
    }
    return { binding, missing };
  }

  private selfBinding(type: string, obj: ObjectState) {
    return propertiesToCel(obj.properties, ownValue(this.model.schema.objectTypes, type)?.properties);
  }

  /**
   * One aggregate for many objects. Written as lookups by key (LATERAL … OFFSET 0 keeps each one
   * an index probe), so that the plan does not depend on statistics a fresh world lacks.
   */
  private aggregateStatement(spec: AggregateSpec, pks: string[]): Statement {
    if (spec.series !== undefined) return this.windowStatement(spec, pks);
    const [near, far] = spec.direction === 'out' ? ['from_pk', 'to_pk'] : ['to_pk', 'from_pk'];
    const values: unknown[] = [this.world, spec.linkType, spec.targetType, pks];
    let input = 'NULL::numeric';
    let join = '';
    let seq = 'greatest(l.seq, o.seq)';
    let kind = 'NULL::text';
    if (spec.property !== undefined) {
      values.push(spec.property);
      input = `CASE WHEN jsonb_typeof(o.properties->$5) = 'number' THEN (o.properties->>$5)::numeric END`;
    } else if (spec.derived !== undefined) {
      values.push(spec.derived);
      join = `LEFT JOIN LATERAL (SELECT value, value_kind, error, source_seq FROM derived_values
                                  WHERE world_id = $1 AND object_type = $3 AND pk = o.pk AND name = $5 OFFSET 0) dv ON true`;
      input = `CASE WHEN dv.error IS NULL AND jsonb_typeof(dv.value) = 'number' THEN (dv.value#>>'{}')::numeric END`;
      seq = 'greatest(l.seq, o.seq, dv.source_seq)';
      kind = 'dv.value_kind';
    }
    const fn =
      spec.function === 'count'
        ? 'NULL'
        : spec.function === 'avg'
          ? 'avg(x.input)::float8'
          : `${spec.function}(x.input)::text`;
    if (this.forked) {
      // The same through the chain: links at the near end, the far objects and their values
      // each the nearest world's by its point.
      const atNear = spec.direction === 'out' ? 'rm_links_out_at' : 'rm_links_in_at';
      const derivedJoin =
        spec.derived === undefined
          ? ''
          : `LEFT JOIN LATERAL (SELECT value, value_kind, error, source_seq FROM rm_derived_at($1, $3, l.${far})
                                 WHERE name = $5) dv ON true`;
      return {
        text: `SELECT k.pk, count(*)::int AS n, max(x.seq)::text AS seq, ${fn} AS v,
                coalesce(bool_and(x.kind = 'int') FILTER (WHERE x.input IS NOT NULL), true) AS ints
           FROM unnest($4::text[]) AS k(pk)
          CROSS JOIN LATERAL (
            SELECT ${input} AS input, ${seq} AS seq, ${kind} AS kind
              FROM ${atNear}($1, $2, k.pk) l
             CROSS JOIN LATERAL (SELECT seq, properties FROM rm_object_at($1, $3, l.${far}) WHERE NOT deleted) o
             ${derivedJoin}
             WHERE NOT l.deleted
          ) x
          GROUP BY k.pk`,
        values,
      };
    }
    return {
      text: `SELECT k.pk, count(*)::int AS n, max(x.seq)::text AS seq, ${fn} AS v,
              coalesce(bool_and(x.kind = 'int') FILTER (WHERE x.input IS NOT NULL), true) AS ints
         FROM unnest($4::text[]) AS k(pk)
        CROSS JOIN LATERAL (
          SELECT ${input} AS input, ${seq} AS seq, ${kind} AS kind
            FROM rm_links l
           CROSS JOIN LATERAL (SELECT pk, seq, properties FROM rm_objects
                                WHERE world_id = $1 AND type = $3 AND pk = l.${far} AND NOT deleted OFFSET 0) o
           ${join}
           WHERE l.world_id = $1 AND l.link_type = $2 AND l.${near} = k.pk AND NOT l.deleted
          OFFSET 0
        ) x
        GROUP BY k.pk`,
      values,
    };
  }

  /** A window of an object's own series, ending at its latest point (docs/adr/0028); in a fork, up the chain. */
  private windowStatement(spec: AggregateSpec, pks: string[]): Statement {
    const fn =
      spec.function === 'count'
        ? 'NULL'
        : spec.function === 'avg'
          ? 'avg(p.num)::float8'
          : `${spec.function}(p.num::numeric)::text`;
    const values = [this.world, spec.targetType, spec.series, pks, spec.windowMs];
    if (this.forked) {
      // Through the chain (docs/adr/0033): the fork's own points, and each base's written by its
      // fork point, the nearest world's winning an instant; the window ends at the latest of them.
      return {
        text: `WITH p AS (
           SELECT k.pk, x.time, x.num, x.seq
             FROM unnest($4::text[]) AS k(pk)
            CROSS JOIN LATERAL (
              SELECT DISTINCT ON (r.time) r.time, r.num, r.seq
                FROM rm_chain($1) c
                JOIN rm_series_points r
                  ON r.world_id = c.world_id AND r.type = $2 AND r.pk = k.pk AND r.series = $3
                 AND (c.point IS NULL OR r.seq <= c.point)
               ORDER BY r.time, c.depth
            ) x
         )
         SELECT p.pk, count(*)::int AS n, max(p.seq)::text AS seq, ${fn} AS v, true AS ints
           FROM p JOIN (SELECT pk, max(time) AS last FROM p GROUP BY pk) m USING (pk)
          WHERE p.time > m.last - make_interval(secs => $5::float8 / 1000)
          GROUP BY p.pk`,
        values,
      };
    }
    return {
      text: `SELECT k.pk, count(*)::int AS n, max(p.seq)::text AS seq, ${fn} AS v, true AS ints
         FROM unnest($4::text[]) AS k(pk)
        CROSS JOIN LATERAL (SELECT max(time) AS last FROM rm_series_points
                             WHERE world_id = $1 AND type = $2 AND pk = k.pk AND series = $3) m
         JOIN rm_series_points p
           ON p.world_id = $1 AND p.type = $2 AND p.pk = k.pk AND p.series = $3
          AND p.time > m.last - make_interval(secs => $5::float8 / 1000)
        GROUP BY k.pk`,
      values,
    };
  }

  private aggregateValue(spec: AggregateSpec, row: AggregateRow | undefined): unknown {
    if (spec.function === 'count') return BigInt(row?.n ?? 0);
    const v = row?.v ?? null;
    const int = spec.numeric === 'int' || (spec.numeric === 'derived' && (row?.ints ?? true));
    if (v === null) return spec.function === 'sum' ? (int ? 0n : 0) : null;
    if (typeof v === 'number') return v;
    return numberOf(v, int);
  }

  private async recompute(def: ResolvedDerived, pks: string[]) {
    // The objects not read yet and the aggregates go in one trip; the aggregates are then asked
    // for every object, and those of objects found deleted go unused.
    const missing = this.missing(def.objectType, pks);
    const over = missing.length > 0 ? pks : this.live(def.objectType, pks).map((o) => o.pk);
    if (over.length === 0) return;
    const reads = def.aggregates.map((spec) => this.aggregateStatement(spec, over));
    if (missing.length > 0) reads.unshift(this.loadStatement(def.objectType, missing));
    const answers = await this.sql.queryAll(reads);
    if (missing.length > 0) this.remember(def.objectType, missing, answers.shift()?.rows ?? []);
    const objects = this.live(def.objectType, pks);
    if (objects.length === 0) return;
    const aggregates = new Map<string, Map<string, AggregateRow>>();
    def.aggregates.forEach((spec, i) => {
      const rows = (answers[i]?.rows ?? []) as unknown as AggregateRow[];
      aggregates.set(spec.alias, new Map(rows.map((r) => [r.pk, r])));
    });

    const rows = {
      pk: [] as string[],
      value: [] as (string | null)[],
      kind: [] as (string | null)[],
      error: [] as (string | null)[],
      sourceVersion: [] as number[],
      sourceSeq: [] as number[],
      sources: [] as string[],
    };
    const changed: string[] = [];
    const pause = evaluationSlices();
    for (const obj of objects) {
      await pause();
      let sourceSeq = obj.seq;
      const sources: Record<string, unknown> = { self: { version: obj.version, seq: obj.seq } };
      const { binding: derived, missing } = this.derivedBinding(obj, def.ownDerived);
      if (def.ownDerived.size > 0) {
        const read: Record<string, number | null> = {};
        for (const name of def.ownDerived) {
          const d = obj.derived.get(name);
          setOwn(read, name, d?.sourceSeq ?? null);
          if (d) sourceSeq = Math.max(sourceSeq, d.sourceSeq);
        }
        sources.derived = read;
      }
      const agg: Record<string, unknown> = {};
      if (def.aggregates.length > 0) {
        const read: Record<string, { count: number; seq: number | null }> = {};
        for (const spec of def.aggregates) {
          const row = aggregates.get(spec.alias)?.get(obj.pk);
          setOwn(agg, spec.alias, this.aggregateValue(spec, row));
          const seq = row?.seq ? Number(row.seq) : null;
          setOwn(read, spec.alias, { count: row?.n ?? 0, seq });
          if (seq !== null) sourceSeq = Math.max(sourceSeq, seq);
        }
        sources.agg = read;
      }
      let outcome: Outcome = evaluate(def.program, { self: this.selfBinding(def.objectType, obj), derived, agg });
      if ('error' in outcome && missing.length > 0) {
        outcome = { error: `${outcome.error} (derived ${missing.join(', ')} has no value)` };
      }
      const next: DerivedState =
        'error' in outcome
          ? { value: null, kind: null, error: { message: outcome.error }, sourceSeq }
          : { value: outcome.value, kind: outcome.kind, error: null, sourceSeq };
      const previous = obj.derived.get(def.name);
      if (!previous || !sameState(previous, next)) changed.push(obj.pk);
      obj.derived.set(def.name, next);
      rows.pk.push(obj.pk);
      rows.value.push(next.error ? null : JSON.stringify(next.value ?? null));
      rows.kind.push(next.kind);
      rows.error.push(next.error ? JSON.stringify(next.error) : null);
      rows.sourceVersion.push(obj.version);
      rows.sourceSeq.push(sourceSeq);
      rows.sources.push(JSON.stringify(sources));
    }
    // clock_timestamp, not now(): the value was computed after this transaction took the
    // world's lock, so after any definition change it could have waited for. Held back: it
    // travels with the next read, or with the caller's next statement (COMMIT for a batch).
    // A value that changes keeps the one it replaces in history with its data-seq interval
    // (docs/adr/0033): `valid_seq` is the world's watermark in this transaction, which a batch
    // of changes advances first; a value recomputed unchanged keeps its `valid_seq`. A value of
    // another definition version is kept whatever its `valid_seq` (a fork may still read it,
    // docs/adr/0068), valid up to the data change this recompute read (its source seq, if newer
    // than the old value's), else up to and including this watermark.
    this.sql.write(
      `WITH u AS (
         SELECT * FROM unnest($5::text[], $6::jsonb[], $7::text[], $8::jsonb[], $9::bigint[], $10::bigint[], $11::jsonb[])
           AS u(pk, value, kind, error, sv, ss, sources)
       ), asof AS (SELECT rm_world_seq($1) AS seq), kept AS (
         INSERT INTO derived_values_history (world_id, object_type, pk, name, value, value_kind, error, computed_at,
                                             definition_version, source_version, source_seq, sources, valid_seq,
                                             superseded_seq)
         SELECT o.world_id, o.object_type, o.pk, o.name, o.value, o.value_kind, o.error, o.computed_at,
                o.definition_version, o.source_version, o.source_seq, o.sources, o.valid_seq,
                CASE WHEN o.definition_version = $4 THEN asof.seq
                     WHEN u.ss > o.source_seq THEN greatest(u.ss, o.valid_seq + 1)
                     ELSE asof.seq + 1 END
           FROM u CROSS JOIN asof
           JOIN derived_values o ON o.world_id = $1 AND o.object_type = $2 AND o.pk = u.pk AND o.name = $3
          WHERE (o.valid_seq < asof.seq
                 AND (o.value IS DISTINCT FROM u.value OR o.value_kind IS DISTINCT FROM u.kind
                      OR o.error IS DISTINCT FROM u.error))
             OR o.definition_version <> $4
       )
       INSERT INTO derived_values AS d (world_id, object_type, pk, name, value, value_kind, error, computed_at,
                                        definition_version, source_version, source_seq, sources, valid_seq)
       SELECT $1, $2, u.pk, $3, u.value, u.kind, u.error, clock_timestamp(), $4, u.sv, u.ss, u.sources, asof.seq
         FROM u CROSS JOIN asof
       ON CONFLICT (world_id, object_type, pk, name) DO UPDATE
         SET value = EXCLUDED.value, value_kind = EXCLUDED.value_kind, error = EXCLUDED.error,
             computed_at = EXCLUDED.computed_at, definition_version = EXCLUDED.definition_version,
             source_version = EXCLUDED.source_version, source_seq = EXCLUDED.source_seq, sources = EXCLUDED.sources,
             valid_seq = CASE WHEN d.value IS DISTINCT FROM EXCLUDED.value OR d.value_kind IS DISTINCT FROM EXCLUDED.value_kind
                                OR d.error IS DISTINCT FROM EXCLUDED.error
                                OR d.definition_version <> EXCLUDED.definition_version
                              THEN EXCLUDED.valid_seq ELSE d.valid_seq END`,
      [
        this.world,
        def.objectType,
        def.name,
        def.version,
        rows.pk,
        rows.value,
        rows.kind,
        rows.error,
        rows.sourceVersion,
        rows.sourceSeq,
        rows.sources,
      ],
    );
    this.stats.values += rows.pk.length;
    this.stats.changed += changed.length;
    this.stats.definitions.add(def.name);
    this.propagate(def, changed);
  }

  /** Values of `def` changed on these objects: what reads them must be recomputed too. */
  private propagate(def: ResolvedDerived, pks: string[]) {
    if (pks.length === 0) return;
    for (const other of this.model.derivedByType.get(def.objectType) ?? []) {
      if (other.ownDerived.has(def.name)) for (const pk of pks) add(this.dirty, other.name, pk);
    }
    for (const rule of this.model.rulesByType.get(def.objectType) ?? []) {
      if (rule.ownDerived.has(def.name)) for (const pk of pks) add(this.ruleDirty, rule.name, pk);
    }
    for (const use of this.model.aggregatesOverType.get(def.objectType) ?? []) {
      if (use.spec.derived === def.name) for (const pk of pks) this.markLinked(use, pk);
    }
  }

  private async evaluateRules() {
    const raise: (NewAlert & { cause?: string | undefined })[] = [];
    const clear: { id: string; objectVersion: number | null; cause?: string | undefined }[] = [];
    for (const [name, pks] of this.ruleDirty) {
      const rule = this.model.rules.get(name);
      if (!rule) continue;
      await this.load(rule.objectType, [...pks]);
      const objects = this.live(rule.objectType, pks);
      if (objects.length === 0) continue;
      const open = new Map(
        (
          await openAlerts(
            this.sql,
            this.world,
            rule.objectType,
            objects.map((o) => o.pk),
            rule.name,
          )
        ).map((a) => [a.pk, a.id]),
      );
      const pause = evaluationSlices();
      for (const obj of objects) {
        await pause();
        const result = evaluateCondition(rule.program, {
          self: this.selfBinding(rule.objectType, obj),
          derived: this.derivedBinding(obj, rule.ownDerived).binding,
        });
        if (typeof result !== 'boolean') {
          // An error says nothing about the condition: the alert stays as it is.
          this.stats.ruleErrors++;
          continue;
        }
        const openId = open.get(obj.pk);
        const cause = this.causes.get(keyOf(rule.objectType, obj.pk));
        if (result && openId === undefined) {
          raise.push({
            worldId: this.world,
            rule: rule.name,
            ruleVersion: rule.version,
            alertType: rule.alertType,
            severity: rule.severity,
            objectType: rule.objectType,
            pk: obj.pk,
            objectVersion: obj.version,
            cause,
          });
        } else if (!result && openId !== undefined) {
          clear.push({ id: openId, objectVersion: obj.version, cause });
        }
      }
    }
    this.ruleDirty.clear();
    if (clear.length === 0 && raise.length === 0) return;
    const tx = await this.sql.direct();
    this.stats.cleared += (await clearAlerts(tx, this.world, clear, 'condition false', this.ctx.topicPrefix)).length;
    const raised = await raiseAlerts(tx, raise, this.ctx.topicPrefix);
    this.stats.raised += raised.length;
    await this.decide(raised);
  }

  private async decide(raised: Alert[]) {
    const items = [];
    for (const alert of raised) {
      const defs = [
        ...(this.model.decisionsByRule.get(alert.rule) ?? []),
        ...(this.model.decisionsByAlertType.get(alert.alertType) ?? []),
      ];
      if (defs.length === 0) continue;
      const obj = this.objects.get(keyOf(alert.objectType, alert.pk));
      if (!obj) continue;
      const bindings: Bindings = {
        self: this.selfBinding(alert.objectType, obj),
        derived: this.derivedBinding(
          obj,
          (this.model.derivedByType.get(alert.objectType) ?? []).map((d) => d.name),
        ).binding,
        alert: {
          id: alert.id,
          rule: alert.rule,
          alertType: alert.alertType,
          severity: alert.severity,
          objectType: alert.objectType,
          pk: alert.pk,
          raisedAt: alert.raisedAt,
        },
      };
      for (const decision of defs) items.push({ decision, alert, bindings });
    }
    if (items.length === 0) return;
    this.stats.decisions += (await makeDecisions(await this.sql.direct(), this.ctx, items)).length;
  }
}

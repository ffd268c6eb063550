import { canonicalJson, type Queryable, type SchemaDocument } from '@onto/shared';
import { checkObject } from '../objects/model.js';
import {
  type ChangedAt,
  type Choice,
  type ConflictType,
  choose,
  classifyLink,
  classifyObject,
  type Properties,
  propertyOf,
  resolveObject,
  type State,
  type Strategy,
  sameState,
} from './classify.js';
import {
  changedSince,
  keyOf,
  type LinkKey,
  linkCandidates,
  linksAt,
  type ObjectKey,
  objectCandidates,
  objectsAt,
  pointOf,
  versionsSince,
  type Written,
} from './read.js';

/*
 * A merge computed from its points (docs/adr/0038): the candidate keys, their three states, the
 * classification, the strategy's (or a person's) settlement and the schema check. The plan
 * stores its result; merge-verify computes it again from the recorded points and choices.
 */

export interface MergeSpec {
  target: string;
  source: string;
  strategy: Strategy;
  baseWorld: string | null;
  baseSeq: number | null;
  sourceSeq: number;
  targetSeq: number;
  schema: SchemaDocument;
  /** A revert (docs/adr/0081): only the keys this merge of the target wrote are candidates. */
  reverts?: string | null;
}

export interface MergeConflictBody {
  id: string;
  type: ConflictType;
  entity: Record<string, unknown>;
  base: unknown;
  source: unknown;
  target: unknown;
  sourceAt?: string | null;
  targetAt?: string | null;
  reason?: string;
}

export interface ComputedConflict {
  body: MergeConflictBody;
  property?: string;
  choice: Choice | null;
  /** Who chose: the strategy, a person (recorded), or nobody yet. */
  by: 'strategy' | 'person' | null;
}

export interface Item {
  n: number;
  kind: 'object' | 'link';
  type: string;
  pk: string;
  toPk: string;
  fromType: string | null;
  toType: string | null;
  base: State | true;
  source: State | true;
  target: State | true;
  /** The target's own head as read (null: none). */
  targetSeq: number | null;
  targetVersion: number | null;
  /** The state read in the target, whoever wrote it (the apply continues its version). */
  readVersion: number;
  /** Settled merged state (objects: properties or null; links: true or null). */
  merged: State | true;
  conflicts: ComputedConflict[];
}

export interface Computed {
  items: Item[];
  /** Items whose merged state differs from the target's. */
  changes: { objects: number; links: number };
  conflicts: number;
}

const iso = (c: ChangedAt | null) => (c === null ? null : new Date(Math.floor(c.micros / 1000)).toISOString());

/** When a side last changed a property (or, without one, the object) since the base. */
function lastChange(versions: Written[] | undefined, base: State, property?: string): ChangedAt | null {
  if (!versions || versions.length === 0) return null;
  if (property === undefined) {
    const v = versions[versions.length - 1] as Written;
    return { micros: v.micros, seq: v.seq };
  }
  let prev: unknown = propertyOf(base, property);
  let last: ChangedAt | null = null;
  for (const v of versions) {
    const value = propertyOf(v.state, property);
    if (canonicalJson(value) !== canonicalJson(prev)) last = { micros: v.micros, seq: v.seq };
    prev = value;
  }
  return last;
}

/** Why merged properties do not fit the merged schema, or null when they do. */
function schemaFault(schema: SchemaDocument, type: string, pk: string, state: State): string | null {
  if (state === null) return null;
  const def = Object.hasOwn(schema.objectTypes, type) ? schema.objectTypes[type] : undefined;
  if (!def) return `object type ${type} is not in the merged schema`;
  const { errors } = checkObject(def, state, pk);
  if (errors.length === 0) return null;
  return `the merged object does not fit the merged schema: ${errors
    .slice(0, 5)
    .map((e) => `${e.path} ${e.message}`)
    .join('; ')}`;
}

const live = (s: { live: boolean } | undefined) => s?.live ?? false;

/**
 * The keys a merge of the target wrote (docs/adr/0081): a revert considers these only, so a
 * write of another key whose seq fell between the reverted merge's seqs is not taken for its.
 */
async function writtenKeys(db: Queryable, world: string, merge: string): Promise<Set<string>> {
  const { rows } = await db.query<{ kind: string; type: string; pk: string; to_pk: string }>(
    'SELECT kind, type, pk, to_pk FROM merge_items WHERE world_id = $1 AND merge_id = $2 AND written_seq IS NOT NULL',
    [world, merge],
  );
  return new Set(rows.map((r) => (r.kind === 'link' ? keyOf(r.type, r.pk, r.to_pk) : keyOf(r.type, r.pk))));
}

/**
 * The point a revert reads its source at (docs/adr/0081): just before the first write of the
 * merge it undoes (its keys held the states the plan read until then), or null when that merge
 * is not applied in data.
 */
export async function beforeMerge(
  db: Queryable,
  world: string,
  merge: string,
): Promise<{ seq: number } | { status: string } | null> {
  const { rows } = await db.query<{ status: string; commit_seq: string | null; first: string | null }>(
    `SELECT m.status, m.commit_seq,
            (SELECT min(written_seq) FROM merge_items i WHERE i.world_id = m.world_id AND i.merge_id = m.id) AS first
       FROM merges m WHERE m.world_id = $1 AND m.id = $2`,
    [world, merge],
  );
  const m = rows[0];
  if (!m) return null;
  if (m.status !== 'applied') return { status: m.status };
  return { seq: m.first === null ? Number(m.commit_seq ?? 0) : Number(m.first) - 1 };
}

/**
 * Computes the merge. `recorded` (merge-verify, and the apply's re-check) gives the choices made
 * for conflict ids; otherwise the strategy settles what it can.
 */
export async function computeMerge(
  db: Queryable,
  spec: MergeSpec,
  recorded?: Map<string, Choice | null>,
): Promise<Computed> {
  const base = await pointOf(db, spec.baseWorld, spec.baseSeq ?? 0);
  const source = await pointOf(db, spec.source, spec.sourceSeq);
  const target = await pointOf(db, spec.target, spec.targetSeq);
  const iv = changedSince(base, source, target);
  const written = spec.reverts ? await writtenKeys(db, spec.target, spec.reverts) : null;
  const objectKeys = (await objectCandidates(db, iv)).filter((k) => !written || written.has(keyOf(k.type, k.pk)));
  const linkKeys = (await linkCandidates(db, iv)).filter(
    (k) => !written || written.has(keyOf(k.linkType, k.fromPk, k.toPk)),
  );
  const [b, s, t] = [
    await objectsAt(db, base, objectKeys),
    await objectsAt(db, source, objectKeys),
    await objectsAt(db, target, objectKeys),
  ];

  const items: Item[] = [];
  const conflicts: ComputedConflict[] = [];
  const nextId = () => `d-${conflicts.length + 1}`;
  const strategyChoice = (at: { source: ChangedAt | null; target: ChangedAt | null }) => choose(spec.strategy, at);
  const choiceOf = (id: string, fallback: Choice | null): [Choice | null, ComputedConflict['by']] => {
    if (recorded?.has(id)) {
      const r = recorded.get(id) ?? null;
      return [r, r === null ? null : 'person'];
    }
    return [fallback, fallback === null ? null : 'strategy'];
  };

  // Classify every key; TIMESTAMP data is read for the conflicting keys only.
  const classified = objectKeys.map((k) => {
    const key = keyOf(k.type, k.pk);
    const [bs, ss, ts] = [b.get(key)?.state ?? null, s.get(key)?.state ?? null, t.get(key)?.state ?? null];
    return { k, key, bs, ss, ts, c: classifyObject(bs, ss, ts) };
  });
  const conflicting: ObjectKey[] = classified.filter((x) => x.c.conflicts.length > 0).map((x) => x.k);
  const after = spec.baseSeq ?? 0;
  const sourceVersions = await versionsSince(db, source, after, conflicting);
  const targetVersions = await versionsSince(db, target, after, conflicting);

  const mergedObjects = new Map<string, State>();
  for (const { k, key, bs, ss, ts, c } of classified) {
    const own = t.get(key);
    const item: Item = {
      n: 0,
      kind: 'object',
      type: k.type,
      pk: k.pk,
      toPk: '',
      fromType: null,
      toType: null,
      base: bs,
      source: ss,
      target: ts,
      targetSeq: own && own.depth === 0 ? own.seq : null,
      targetVersion: own && own.depth === 0 ? own.version : null,
      readVersion: own?.version ?? 0,
      merged: c.merged,
      conflicts: [],
    };
    const entity = { kind: 'object', type: k.type, pk: k.pk };
    for (const f of c.conflicts) {
      const at = {
        source: lastChange(sourceVersions.get(key), bs, f.property),
        target: lastChange(targetVersions.get(key), bs, f.property),
      };
      const id = nextId();
      const [choice, by] = choiceOf(id, strategyChoice(at));
      const cc: ComputedConflict = {
        body: {
          id,
          type: f.type,
          entity: f.property === undefined ? entity : { ...entity, property: f.property },
          base: f.base,
          source: f.source,
          target: f.target,
          sourceAt: iso(at.source),
          targetAt: iso(at.target),
        },
        ...(f.property === undefined ? {} : { property: f.property }),
        choice,
        by,
      };
      item.conflicts.push(cc);
      conflicts.push(cc);
    }
    const settled = (list: ComputedConflict[]) =>
      resolveObject(
        c.merged,
        ss,
        ts,
        list.map((x) => ({ type: x.body.type, property: x.property, choice: x.choice })),
      );
    let merged = settled(item.conflicts);
    // The merged object against the merged schema: a misfit is a conflict. A MANUAL merge with
    // conflicts on the object waits for the person's choices (the apply checks the result); the
    // rule depends on the strategy alone, so merge-verify numbers the conflicts as the plan did.
    const open = spec.strategy === 'MANUAL' && item.conflicts.length > 0;
    const fault = open ? null : schemaFault(spec.schema, k.type, k.pk, merged);
    if (fault !== null) {
      const id = nextId();
      const side = spec.strategy === 'TIMESTAMP_WINS' ? null : strategyChoice({ source: null, target: null });
      const whole =
        side ??
        choose(spec.strategy, {
          source: lastChange(sourceVersions.get(key), bs),
          target: lastChange(targetVersions.get(key), bs),
        });
      // The strategy settles it only with a side whose whole object fits.
      const fits =
        whole !== null &&
        whole.take !== 'value' &&
        schemaFault(spec.schema, k.type, k.pk, whole.take === 'source' ? ss : ts) === null;
      const [choice, by] = choiceOf(id, fits ? whole : null);
      const cc: ComputedConflict = {
        body: { id, type: 'SCHEMA_CONFLICT', entity, base: bs, source: ss, target: ts, reason: fault },
        choice,
        by,
      };
      item.conflicts.push(cc);
      conflicts.push(cc);
      merged = settled(item.conflicts);
    }
    item.merged = merged;
    mergedObjects.set(key, merged);
    if (item.conflicts.length > 0 || !sameState(merged, ts)) items.push(item);
  }

  // Links: live or not; a live link needs both ends in the merged result and its to-one places free.
  const [lb, ls, lt] = [
    await linksAt(db, base, linkKeys),
    await linksAt(db, source, linkKeys),
    await linksAt(db, target, linkKeys),
  ];
  const ends: ObjectKey[] = [];
  for (const l of linkKeys) {
    for (const e of [
      { type: l.fromType, pk: l.fromPk },
      { type: l.toType, pk: l.toPk },
    ]) {
      if (!mergedObjects.has(keyOf(e.type, e.pk))) ends.push(e);
    }
  }
  const untouched = await objectsAt(db, target, ends);
  const endLive = (type: string, pk: string) => {
    const key = keyOf(type, pk);
    return mergedObjects.has(key) ? mergedObjects.get(key) !== null : (untouched.get(key)?.state ?? null) !== null;
  };
  const linkItems: { item: Item; l: LinkKey; added: boolean }[] = [];
  for (const l of linkKeys) {
    const key = keyOf(l.linkType, l.fromPk, l.toPk);
    const [bl, sl, tl] = [live(lb.get(key)), live(ls.get(key)), live(lt.get(key))];
    const own = lt.get(key);
    const item: Item = {
      n: 0,
      kind: 'link',
      type: l.linkType,
      pk: l.fromPk,
      toPk: l.toPk,
      fromType: l.fromType,
      toType: l.toType,
      base: bl ? true : null,
      source: sl ? true : null,
      target: tl ? true : null,
      targetSeq: own && own.depth === 0 ? own.seq : null,
      targetVersion: own && own.depth === 0 ? own.version : null,
      readVersion: own?.version ?? 0,
      merged: classifyLink(bl, sl, tl) ? true : null,
      conflicts: [],
    };
    const entity = {
      kind: 'link',
      linkType: l.linkType,
      from: { type: l.fromType, pk: l.fromPk },
      to: { type: l.toType, pk: l.toPk },
    };
    const linkConflict = (reason: string, type: ConflictType, settle: Choice | null) => {
      const id = nextId();
      const [choice, by] = choiceOf(id, settle);
      const cc: ComputedConflict = {
        body: { id, type, entity, base: item.base, source: item.source, target: item.target, reason },
        choice,
        by,
      };
      item.conflicts.push(cc);
      conflicts.push(cc);
      if (choice !== null) {
        item.merged =
          choice.take === 'source' ? item.source : choice.take === 'target' ? item.target : choice.value ? true : null;
      }
    };
    if (!Object.hasOwn(spec.schema.linkTypes, l.linkType) && item.merged !== null) {
      linkConflict(`link type ${l.linkType} is not in the merged schema`, 'SCHEMA_CONFLICT', null);
    } else if (item.merged !== null) {
      const missing = [
        endLive(l.fromType, l.fromPk) ? null : `${l.fromType} ${l.fromPk}`,
        endLive(l.toType, l.toPk) ? null : `${l.toType} ${l.toPk}`,
      ].filter((x) => x !== null);
      if (missing.length > 0) {
        // No strategy keeps a link to nothing: it settles with the side that has no link.
        const without: Choice = { take: sl ? 'target' : 'source' };
        linkConflict(
          `${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} absent in the merged result: the link would have no end`,
          'MODIFY_DELETE',
          spec.strategy === 'MANUAL' ? null : without,
        );
      }
    }
    if (item.conflicts.length > 0 || item.merged !== item.target) {
      linkItems.push({ item, l, added: item.merged === true && item.target === null });
    }
  }
  await cardinality(db, spec, target, linkItems, mergedLinkState(linkItems), (x, reason) => {
    const id = nextId();
    // The target's link keeps the place unless a person takes the source's (then the apply checks it).
    const [choice, by] = choiceOf(id, spec.strategy === 'MANUAL' ? null : { take: 'target' });
    const cc: ComputedConflict = {
      body: {
        id,
        type: 'MODIFY_MODIFY',
        entity: {
          kind: 'link',
          linkType: x.l.linkType,
          from: { type: x.l.fromType, pk: x.l.fromPk },
          to: { type: x.l.toType, pk: x.l.toPk },
        },
        base: x.item.base,
        source: x.item.source,
        target: x.item.target,
        reason,
      },
      choice,
      by,
    };
    x.item.conflicts.push(cc);
    conflicts.push(cc);
    x.item.merged = choice === null || choice.take === 'target' ? x.item.target : x.item.source;
  });
  items.push(...linkItems.map((x) => x.item));
  items.forEach((item, i) => {
    item.n = i + 1;
  });
  const changes = { objects: 0, links: 0 };
  for (const item of items) {
    const differs =
      item.kind === 'object' ? !sameState(item.merged as State, item.target as State) : item.merged !== item.target;
    if (differs) changes[item.kind === 'object' ? 'objects' : 'links']++;
  }
  return { items, changes, conflicts: conflicts.length };
}

const mergedLinkState = (xs: { item: Item }[]) => {
  const m = new Map<string, boolean>();
  for (const { item } of xs) m.set(keyOf(item.type, item.pk, item.toPk), item.merged === true);
  return m;
};

/**
 * The to-one places the added links take: another live link on that side in the target (and
 * not deleted by the merge), or another link the merge adds there, breaks the link type's
 * cardinality in the merged result.
 */
async function cardinality(
  db: Queryable,
  spec: MergeSpec,
  target: Awaited<ReturnType<typeof pointOf>>,
  xs: { item: Item; l: LinkKey; added: boolean }[],
  merged: Map<string, boolean>,
  conflict: (x: { item: Item; l: LinkKey }, reason: string) => void,
): Promise<void> {
  const taken = new Map<string, string>(); // linkType/side/pk → link key taking it in the merge
  for (const x of xs) {
    if (!x.added) continue;
    const linkTypes = spec.schema.linkTypes;
    const type = Object.hasOwn(linkTypes, x.l.linkType) ? linkTypes[x.l.linkType] : undefined;
    if (!type) continue;
    const sides: ['from' | 'to', string][] = [];
    if (type.cardinality === 'ONE_TO_ONE') sides.push(['from', x.l.fromPk]);
    if (type.cardinality !== 'MANY_TO_MANY') sides.push(['to', x.l.toPk]);
    for (const [side, pk] of sides) {
      const column = side === 'from' ? 'from_pk' : 'to_pk';
      const { rows } = await db.query<{ from_pk: string; to_pk: string }>(
        `SELECT DISTINCT ON (x.from_pk, x.to_pk) x.from_pk, x.to_pk, x.deleted
           FROM unnest($1::text[], $2::bigint[], $3::int[]) AS ch(world_id, up_to, depth)
           JOIN link_history x ON x.world_id = ch.world_id AND x.seq <= ch.up_to AND x.link_type = $4 AND x.${column} = $5
          ORDER BY x.from_pk, x.to_pk, ch.depth, x.seq DESC`,
        [
          target.chain.map((c) => c.world),
          target.chain.map((c) => c.upTo ?? target.commit),
          target.chain.map((_, i) => i),
          x.l.linkType,
          pk,
        ],
      );
      const occupants = (rows as { from_pk: string; to_pk: string; deleted?: boolean }[])
        .filter((r) => !r.deleted)
        .filter((r) => merged.get(keyOf(x.l.linkType, r.from_pk, r.to_pk)) !== false)
        .filter((r) => r.from_pk !== x.l.fromPk || r.to_pk !== x.l.toPk);
      const place = `${x.l.linkType}\u0000${side}\u0000${pk}`;
      const other = taken.get(place);
      if (occupants.length > 0 || other !== undefined) {
        const by = occupants[0] ? `${occupants[0].from_pk} → ${occupants[0].to_pk}` : (other as string);
        conflict(
          x,
          `${x.l.linkType} is ${type.cardinality}: ${side === 'from' ? x.l.fromType : x.l.toType} ${pk} would be linked twice in the merged result (also ${by})`,
        );
        break;
      }
      taken.set(place, `${x.l.fromPk} → ${x.l.toPk}`);
    }
  }
}

/** The property map of a state for a conflict's `value` resolution of a whole object. */
export const asState = (value: unknown): State =>
  value === null || value === undefined ? null : (value as Properties);

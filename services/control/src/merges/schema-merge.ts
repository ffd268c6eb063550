/**
 * control's part of a merge: the three-way merge of two schema documents against their base,
 * per type, per property definition and per top-level field (docs/adr/0037). Pure.
 */
import { canonicalJson, type FieldError } from '@onto/shared';
import { checkActionType, checkLinkType, checkObjectType, type SchemaDocument } from '../schema/model.js';

export type Strategy = 'SOURCE_WINS' | 'TARGET_WINS' | 'TIMESTAMP_WINS' | 'MANUAL';
type Kind = 'objectTypes' | 'linkTypes' | 'actionTypes';
const KINDS: { kind: Kind; entity: 'objectType' | 'linkType' | 'actionType'; label: string }[] = [
  { kind: 'objectTypes', entity: 'objectType', label: 'object type' },
  { kind: 'linkTypes', entity: 'linkType', label: 'link type' },
  { kind: 'actionTypes', entity: 'actionType', label: 'action type' },
];

export interface SchemaEntity {
  kind: 'objectType' | 'linkType' | 'actionType';
  apiName: string;
  /** A property definition of an object type. */
  property?: string;
  /** A top-level field of the type (displayName, primaryKey, from, edits, …). */
  field?: string;
}

export interface SchemaConflict {
  id: string;
  type: 'SCHEMA_CONFLICT';
  entity: SchemaEntity;
  base: unknown;
  source: unknown;
  target: unknown;
  sourceAt: string | null;
  targetAt: string | null;
  reason?: string;
  /** No strategy settles it: the merged type fails validation. */
  needsPerson: boolean;
  /** How the strategy settled it; absent: a person must (MANUAL, or needsPerson). */
  take?: 'source' | 'target';
}

/** A side's schema versions, oldest first: when each of its values was last set (TIMESTAMP_WINS). */
export type History = { createdAt: string; document: SchemaDocument }[];

export interface SchemaMergeInput {
  base: SchemaDocument;
  source: SchemaDocument;
  target: SchemaDocument;
  strategy: Strategy;
  sourceHistory?: History;
  targetHistory?: History;
}

const same = (a: unknown, b: unknown) => canonicalJson(a ?? null) === canonicalJson(b ?? null);
type Rec = Record<string, unknown>;
const isRec = (v: unknown): v is Rec => typeof v === 'object' && v !== null && !Array.isArray(v);
// Entities name types, properties and fields from conflicts: one named like a prototype member
// (`constructor`, `toString`) is absent unless the document holds it, and is set as plain data.
const own = (o: Rec, key: string): unknown => (Object.hasOwn(o, key) ? o[key] : undefined);

/** The value at an entity of a document (undefined: absent). */
export function valueAt(doc: SchemaDocument, e: SchemaEntity): unknown {
  const type = own(doc[`${e.kind}s`] as Rec, e.apiName);
  if (e.property !== undefined)
    return isRec(type) && isRec(type.properties) ? own(type.properties, e.property) : undefined;
  if (e.field !== undefined) return isRec(type) ? own(type, e.field) : undefined;
  return type;
}

/** A copy of the document with the entity set to the value (null or undefined: removed). */
export function withValue(doc: SchemaDocument, e: SchemaEntity, value: unknown): SchemaDocument {
  const kind = `${e.kind}s` as Kind;
  const types = { ...(doc[kind] as Rec) };
  const put = (o: Rec, key: string, v: unknown) => {
    if (v === undefined || v === null) {
      if (Object.hasOwn(o, key)) delete o[key];
    } else Object.defineProperty(o, key, { value: v, writable: true, enumerable: true, configurable: true });
  };
  if (e.property === undefined && e.field === undefined) put(types, e.apiName, value);
  else {
    const type: Rec = { ...((own(types, e.apiName) as Rec | undefined) ?? { apiName: e.apiName }) };
    if (e.property !== undefined) {
      const properties = { ...((type.properties as Rec | undefined) ?? {}) };
      put(properties, e.property, value);
      type.properties = properties;
    } else put(type, e.field as string, value);
    put(types, e.apiName, type);
  }
  return { ...doc, [kind]: types } as SchemaDocument;
}

/**
 * When a side last set the entity to the value it holds now: the creation of the oldest version
 * of the run of versions, newest first, that hold it. Null without a history.
 */
function changedAt(history: History | undefined, e: SchemaEntity): string | null {
  const newest = history?.at(-1);
  if (!history || !newest) return null;
  const now = valueAt(newest.document, e);
  let at: string | null = null;
  for (const version of [...history].reverse()) {
    if (!same(valueAt(version.document, e), now)) break;
    at = version.createdAt;
  }
  return at;
}

/** Which side a strategy takes; TIMESTAMP_WINS: the newer change, a tie (or no instant) → source. */
function settle(strategy: Strategy, sourceAt: string | null, targetAt: string | null): 'source' | 'target' | undefined {
  if (strategy === 'SOURCE_WINS') return 'source';
  if (strategy === 'TARGET_WINS') return 'target';
  if (strategy === 'MANUAL') return undefined;
  if (sourceAt && targetAt && Date.parse(targetAt) > Date.parse(sourceAt)) return 'target';
  return 'source';
}

export function mergeSchemas(input: SchemaMergeInput): { document: SchemaDocument; conflicts: SchemaConflict[] } {
  const { base, source, target, strategy } = input;
  let doc: SchemaDocument = structuredClone(target);
  const conflicts: SchemaConflict[] = [];

  const conflict = (entity: SchemaEntity, reason?: string) => {
    const sourceAt = changedAt(input.sourceHistory, entity);
    const targetAt = changedAt(input.targetHistory, entity);
    const take = settle(strategy, sourceAt, targetAt);
    conflicts.push({
      id: `c-${conflicts.length + 1}`,
      type: 'SCHEMA_CONFLICT',
      entity,
      base: valueAt(base, entity) ?? null,
      source: valueAt(source, entity) ?? null,
      target: valueAt(target, entity) ?? null,
      sourceAt,
      targetAt,
      ...(reason ? { reason } : {}),
      needsPerson: false,
      ...(take ? { take } : {}),
    });
    // MANUAL keeps the target's side until a person resolves it.
    if (take === 'source') doc = withValue(doc, entity, valueAt(source, entity));
  };

  /** The seven cases for one entity; true when settled without a conflict. */
  const threeWay = (entity: SchemaEntity): boolean => {
    const [b, s, t] = [valueAt(base, entity), valueAt(source, entity), valueAt(target, entity)];
    if (same(s, t) || same(s, b)) return true; // unchanged, changed alike, or only the target changed: keep
    if (same(t, b)) {
      doc = withValue(doc, entity, s); // only the source changed (added, modified or deleted): take it
      return true;
    }
    return false;
  };

  for (const { kind, entity: kindName } of KINDS) {
    const names = [
      ...new Set([...Object.keys(base[kind]), ...Object.keys(source[kind]), ...Object.keys(target[kind])]),
    ].sort();
    for (const apiName of names) {
      const typeEntity: SchemaEntity = { kind: kindName, apiName };
      if (threeWay(typeEntity)) continue;
      const [s, t] = [valueAt(source, typeEntity), valueAt(target, typeEntity)];
      if (!isRec(s) || !isRec(t)) {
        conflict(
          typeEntity,
          s === undefined
            ? 'deleted in the source, changed in the target'
            : 'changed in the source, deleted in the target',
        );
        continue;
      }
      // Both sides hold the type, changed differently (or added differently): field by field.
      const b = valueAt(base, typeEntity);
      const fields = new Set([...Object.keys(s), ...Object.keys(t), ...(isRec(b) ? Object.keys(b) : [])]);
      fields.delete('apiName');
      if (kind === 'objectTypes') {
        fields.delete('properties');
        const props = (v: unknown) => (isRec(v) && isRec(v.properties) ? Object.keys(v.properties) : []);
        for (const property of [...new Set([...props(b), ...props(s), ...props(t)])].sort()) {
          const entity = { ...typeEntity, property };
          if (!threeWay(entity)) conflict(entity, 'both sides changed this property differently');
        }
      }
      for (const field of [...fields].sort()) {
        const entity = { ...typeEntity, field };
        if (!threeWay(entity)) conflict(entity, 'both sides changed this field differently');
      }
    }
  }
  doc = checkMerged(doc, input, conflicts);
  return { document: doc, conflicts };
}

/** Errors of each type of a document, checked like a PUT of it against the whole document. */
export function invalidTypes(
  doc: SchemaDocument,
): { kind: (typeof KINDS)[number]; apiName: string; errors: FieldError[] }[] {
  const out = [];
  for (const k of KINDS) {
    for (const [apiName, def] of Object.entries(doc[k.kind] as Rec)) {
      const errors =
        k.kind === 'objectTypes'
          ? checkObjectType(def, apiName)
          : k.kind === 'linkTypes'
            ? checkLinkType(def, apiName, doc)
            : checkActionType(def, apiName, doc);
      if (errors.length > 0) out.push({ kind: k, apiName, errors });
    }
  }
  return out;
}

export const describeErrors = (errors: FieldError[]) =>
  errors
    .slice(0, 5)
    .map((e) => `${e.path || '/'} ${e.message}`)
    .join('; ');

/**
 * The merged document must pass control's own validation: a type that does not (a link whose
 * end the other side deleted, a property both sides shaped into an invalid whole) is a conflict
 * no strategy settles, and the merged document keeps the target's side of it.
 */
function checkMerged(doc: SchemaDocument, input: SchemaMergeInput, conflicts: SchemaConflict[]): SchemaDocument {
  let merged = doc;
  const reported = new Set<string>();
  for (let round = 0; round < 3; round++) {
    const invalid = invalidTypes(merged).filter((i) => !reported.has(`${i.kind.kind}/${i.apiName}`));
    if (invalid.length === 0) break;
    for (const { kind, apiName, errors } of invalid) {
      reported.add(`${kind.kind}/${apiName}`);
      const entity: SchemaEntity = { kind: kind.entity, apiName };
      conflicts.push({
        id: `c-${conflicts.length + 1}`,
        type: 'SCHEMA_CONFLICT',
        entity,
        base: valueAt(input.base, entity) ?? null,
        source: valueAt(input.source, entity) ?? null,
        target: valueAt(input.target, entity) ?? null,
        sourceAt: null,
        targetAt: null,
        reason: `the merged ${kind.label} ${apiName} is invalid: ${describeErrors(errors)}`,
        needsPerson: true,
      });
      merged = withValue(merged, entity, valueAt(input.target, entity));
    }
  }
  return merged;
}

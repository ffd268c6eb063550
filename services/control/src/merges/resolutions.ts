/**
 * Resolving one conflict of a merge (`PUT …/conflicts/{cid}`): control validates the resolution
 * against the merged schema, applies control's own (c-) to the merged document, and sends the
 * others' (d-, i-) to the service whose conflict it is (docs/adr/0037).
 */
import { Conflict, checkValue, type FieldError, NotFound, setOwn, Unprocessable } from '@onto/shared';
import type pg from 'pg';
import {
  checkActionType,
  checkLinkType,
  checkObjectType,
  type ObjectType,
  type SchemaDocument,
} from '../schema/model.js';
import { emit, type MergeRow, updateMerge } from './repository.js';
import { type SchemaEntity, withValue } from './schema-merge.js';

export interface Resolution {
  take: 'source' | 'target' | 'value';
  value?: unknown;
}

interface ConflictRow {
  id: string;
  type: string;
  entity: Record<string, unknown>;
  source: unknown;
  target: unknown;
  resolved_at: Date | null;
  resolved_by: string | null;
}

const isRec = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A properties map (or null: the object deleted) checked against an object type. */
function checkProperties(type: ObjectType | undefined, value: unknown, faults: FieldError[]): unknown {
  if (value === null) return null;
  if (!type) {
    faults.push({ path: '/value', message: 'the object type is not in the merged schema: only null (delete) fits' });
    return undefined;
  }
  if (!isRec(value)) {
    faults.push({ path: '/value', message: `must be the properties of a ${type.apiName} or null` });
    return undefined;
  }
  const out: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(value)) {
    const def = Object.hasOwn(type.properties, name) ? type.properties[name] : undefined;
    if (!def) faults.push({ path: `/value/${name}`, message: `is not a property of ${type.apiName}` });
    else if (v === null) {
      if (def.required) faults.push({ path: `/value/${name}`, message: 'is required' });
      setOwn(out, name, null);
    } else setOwn(out, name, checkValue(def.type, v, `/value/${name}`, faults));
  }
  for (const [name, def] of Object.entries(type.properties)) {
    if (def.required && !Object.hasOwn(value, name)) faults.push({ path: `/value/${name}`, message: 'is required' });
  }
  return out;
}

/** A value checked against what the conflict is about; returns it as stored, or throws 422 naming /value. */
function checkResolutionValue(conflict: ConflictRow, value: unknown, schema: SchemaDocument): unknown {
  const faults: FieldError[] = [];
  const e = conflict.entity;
  let checked: unknown = value;
  if (conflict.id.startsWith('c-')) {
    // A schema conflict takes a whole type definition, validated like a PUT of the type.
    const apiName = e.apiName as string;
    const errs =
      e.kind === 'objectType'
        ? checkObjectType(value, apiName)
        : e.kind === 'linkType'
          ? checkLinkType(value, apiName, schema)
          : checkActionType(value, apiName, schema);
    faults.push(...errs.map((f) => ({ path: `/value${f.path === '/' ? '' : f.path}`, message: f.message })));
    checked = isRec(value) ? { ...value, apiName } : value;
  } else if (conflict.id.startsWith('d-')) {
    if (e.kind === 'link') {
      faults.push({ path: '/value', message: 'a link conflict is resolved by take source or take target' });
    } else {
      // The conflict names the type and property: one named like a prototype member is not in the schema.
      const typeName = e.type as string;
      const type = Object.hasOwn(schema.objectTypes, typeName) ? schema.objectTypes[typeName] : undefined;
      if (typeof e.property === 'string') {
        const def = type && Object.hasOwn(type.properties, e.property) ? type.properties[e.property] : undefined;
        if (!def) faults.push({ path: '/value', message: `property ${e.property} is not in the merged schema` });
        else if (value === null) {
          if (def.required) faults.push({ path: '/value', message: `${e.property} is required` });
        } else checked = checkValue(def.type, value, '/value', faults);
      } else checked = checkProperties(type, value, faults);
    }
  }
  // RULE_CONFLICT (i-): intelligence validates the definition when it applies.
  if (faults.length > 0) throw new Unprocessable(`the value does not fit conflict ${conflict.id}`, faults);
  return checked;
}

/** The merged document with a schema conflict's resolution in it. */
export function resolveSchema(
  doc: SchemaDocument,
  conflict: { entity: Record<string, unknown>; source: unknown; target: unknown },
  take: string,
  value: unknown,
): SchemaDocument {
  const entity = conflict.entity as unknown as SchemaEntity;
  if (take === 'value') return withValue(doc, { kind: entity.kind, apiName: entity.apiName }, value);
  return withValue(doc, entity, take === 'source' ? conflict.source : conflict.target);
}

export async function resolveConflict(
  tx: pg.ClientBase,
  topicPrefix: string,
  merge: MergeRow,
  conflictId: string,
  resolution: Resolution,
  actor: string,
): Promise<void> {
  const { rows } = await tx.query<ConflictRow>(
    'SELECT id, type, entity, source, target, resolved_at, resolved_by FROM merge_conflicts WHERE merge_id = $1 AND id = $2',
    [merge.id, conflictId],
  );
  const conflict = rows[0];
  if (!conflict) throw new NotFound(`merge ${merge.id} has no conflict ${conflictId}`);
  if (conflict.resolved_at) {
    throw new Conflict(`conflict ${conflictId} is resolved already (by ${conflict.resolved_by})`, {
      errors: [{ path: '/take', message: 'the conflict is resolved already' }],
    });
  }
  if (merge.status !== 'CONFLICTS' || merge.dry_run) {
    throw new Conflict(
      `merge ${merge.id} is ${merge.status}${merge.dry_run ? ' (a dry run)' : ''}: conflicts are resolved while it waits at CONFLICTS`,
      {
        mergeStatus: merge.status,
      },
    );
  }
  if (resolution.take === 'value' && !('value' in resolution)) {
    throw new Unprocessable('take value needs a value', [{ path: '/value', message: 'is required with take value' }]);
  }
  if (resolution.take !== 'value' && 'value' in resolution) {
    throw new Unprocessable('a value is given with take value only', [
      { path: '/value', message: `must be absent with take ${resolution.take}` },
    ]);
  }
  const value =
    resolution.take === 'value' ? checkResolutionValue(conflict, resolution.value, merge.merged_schema) : undefined;
  await tx.query(
    `UPDATE merge_conflicts SET resolution_take = $3, resolution_value = $4, resolved_by = $5, resolved_at = now()
      WHERE merge_id = $1 AND id = $2`,
    [merge.id, conflictId, resolution.take, value === undefined ? null : JSON.stringify(value), actor],
  );
  if (conflictId.startsWith('c-')) {
    await updateMerge(tx, merge.id, {
      merged_schema: resolveSchema(merge.merged_schema, conflict, resolution.take, value),
    });
  } else {
    await emit(tx, topicPrefix, 'world.merge.conflict.resolved', merge.target, {
      merge: merge.plan_id,
      conflict: conflictId,
      take: resolution.take,
      ...(resolution.take === 'value' ? { value } : {}),
    });
  }
}

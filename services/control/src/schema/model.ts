/**
 * The ontology schema of one world, and the pure rules that keep it whole: what a valid type
 * is, which references must resolve, and what a change breaks. No I/O here.
 */
import {
  CARDINALITIES,
  canonicalJson,
  type FieldError,
  isSeriesType,
  type LinkType,
  type ObjectType,
  PRIMITIVES,
  RETENTION,
  retentionMs,
  type SchemaDocument,
  SERIES_VALUES,
} from '@onto/shared';

export {
  type ActionEdit,
  type ActionType,
  CARDINALITIES,
  emptySchema,
  type LinkType,
  type ObjectType,
  type ParameterDef,
  PRIMITIVES,
  type Primitive,
  type PropertyDef,
  type PropertyType,
  type SchemaDocument,
  type ValueSource,
} from '@onto/shared';

export const NAME = /^[A-Za-z][A-Za-z0-9_]{0,62}$/;
export const NAME_RULE = 'a letter, then letters, digits or _ (at most 63 characters)';

// ---------------------------------------------------------------- shape checks

type Json = unknown;
const isObject = (v: Json): v is Record<string, Json> => typeof v === 'object' && v !== null && !Array.isArray(v);

class Collector {
  readonly errors: FieldError[] = [];
  add(path: string, message: string) {
    this.errors.push({ path, message });
  }
  name(path: string, value: Json) {
    if (typeof value !== 'string' || !NAME.test(value)) this.add(path, `must be a name: ${NAME_RULE}`);
  }
  only(path: string, value: Record<string, Json>, allowed: string[]) {
    for (const key of Object.keys(value))
      if (!allowed.includes(key)) this.add(`${path}/${key}`, 'is not a known field');
  }
  optionalString(path: string, value: Json, max = 4000) {
    if (value !== undefined && (typeof value !== 'string' || value.length > max)) {
      this.add(path, `must be a string of at most ${max} characters`);
    }
  }
  optionalBoolean(path: string, value: Json) {
    if (value !== undefined && typeof value !== 'boolean') this.add(path, 'must be true or false');
  }
}

/** Checks an entry of a property or parameter map: its name, that it is an object, and only `keys` in it. */
function checkTypedEntry(
  c: Collector,
  p: string,
  name: string,
  def: Json,
  keys: string[],
): def is Record<string, Json> {
  c.name(p, name);
  if (!isObject(def)) {
    c.add(p, 'must be an object with a type');
    return false;
  }
  c.only(p, def, keys);
  return true;
}

const esc = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

/** A series' point type: double, integer, boolean or an enum (docs/adr/0028). */
function checkSeriesValue(c: Collector, path: string, v: Json): void {
  if (typeof v === 'string' && (SERIES_VALUES as readonly string[]).includes(v)) return;
  if (isObject(v) && v.type === 'enum') {
    checkPropertyType(c, path, v, 1);
    return;
  }
  c.add(path, `must be one of ${SERIES_VALUES.join(', ')} or {"type": "enum", "values": […]}`);
}

/** `series` is a type of an object property only (not nested, not an action parameter). */
function checkPropertyType(c: Collector, path: string, t: Json, depth = 0, seriesAllowed = false): void {
  if (depth > 8) {
    c.add(path, 'nests more than 8 levels');
    return;
  }
  if (typeof t === 'string') {
    if (!(PRIMITIVES as readonly string[]).includes(t)) {
      c.add(
        path,
        `unknown property type ${JSON.stringify(t)}; expected one of ${PRIMITIVES.join(', ')}, enum, array, struct`,
      );
    }
    return;
  }
  if (!isObject(t)) {
    c.add(path, 'must be a type name or a {"type": "enum" | "array" | "struct", …} object');
    return;
  }
  switch (t.type) {
    case 'enum': {
      c.only(path, t, ['type', 'values']);
      const values = t.values;
      if (!Array.isArray(values) || values.length === 0 || values.length > 1000) {
        c.add(`${path}/values`, 'must be a list of 1 to 1000 strings');
        return;
      }
      values.forEach((v, i) => {
        if (typeof v !== 'string' || v.length === 0 || v.length > 200)
          c.add(`${path}/values/${i}`, 'must be a non-empty string');
      });
      if (new Set(values).size !== values.length) c.add(`${path}/values`, 'must not repeat a value');
      return;
    }
    case 'array':
      c.only(path, t, ['type', 'items']);
      checkPropertyType(c, `${path}/items`, t.items, depth + 1);
      return;
    case 'series':
      if (!seriesAllowed) {
        c.add(`${path}/type`, 'a series is the type of an object property only, not nested nor a parameter');
        return;
      }
      c.only(path, t, ['type', 'value']);
      checkSeriesValue(c, `${path}/value`, t.value);
      return;
    case 'struct': {
      c.only(path, t, ['type', 'fields']);
      if (!isObject(t.fields) || Object.keys(t.fields).length === 0) {
        c.add(`${path}/fields`, 'must name at least one field');
        return;
      }
      for (const [name, field] of Object.entries(t.fields)) {
        c.name(`${path}/fields/${esc(name)}`, name);
        checkPropertyType(c, `${path}/fields/${esc(name)}`, field, depth + 1);
      }
      return;
    }
    default: {
      c.add(`${path}/type`, `unknown property type ${JSON.stringify(t.type)}; expected enum, array, struct or series`);
      return;
    }
  }
}

export function checkObjectType(body: Json, apiName: string): FieldError[] {
  const c = new Collector();
  if (!isObject(body)) return [{ path: '/', message: 'must be an object' }];
  c.only('', body, ['apiName', 'displayName', 'description', 'primaryKey', 'properties']);
  c.name('/apiName', apiName);
  if (body.apiName !== undefined && body.apiName !== apiName) c.add('/apiName', `must equal the path's ${apiName}`);
  if (typeof body.displayName !== 'string' || body.displayName.length === 0 || body.displayName.length > 200) {
    c.add('/displayName', 'must be a string of 1 to 200 characters');
  }
  c.optionalString('/description', body.description);
  const properties = body.properties;
  if (!isObject(properties) || Object.keys(properties).length === 0) {
    c.add('/properties', 'must define at least one property');
  } else {
    if (Object.keys(properties).length > 500) c.add('/properties', 'must define at most 500 properties');
    for (const [name, def] of Object.entries(properties)) {
      const p = `/properties/${esc(name)}`;
      const series = isObject(def) && isObject(def.type) && def.type.type === 'series';
      const keys = series
        ? ['type', 'description', 'unit', 'retention']
        : ['type', 'required', 'indexed', 'description'];
      if (!checkTypedEntry(c, p, name, def, keys)) continue;
      if (def.type === undefined) c.add(`${p}/type`, 'is required');
      else checkPropertyType(c, `${p}/type`, def.type, 0, true);
      c.optionalBoolean(`${p}/required`, def.required);
      c.optionalBoolean(`${p}/indexed`, def.indexed);
      c.optionalString(`${p}/description`, def.description);
      if (series) {
        c.optionalString(`${p}/unit`, def.unit, 50);
        if (def.retention !== undefined && (typeof def.retention !== 'string' || !RETENTION.test(def.retention)))
          c.add(`${p}/retention`, 'must be a whole number of hours, days or weeks, such as 36h, 30d or 52w');
      }
    }
  }
  if (typeof body.primaryKey !== 'string') c.add('/primaryKey', 'must name one of the properties');
  else if (isObject(properties) && !Object.hasOwn(properties, body.primaryKey)) {
    c.add('/primaryKey', `${JSON.stringify(body.primaryKey)} is not one of the properties`);
  } else if (isObject(properties)) {
    const pk = properties[body.primaryKey] as Record<string, Json>;
    if (pk && !['string', 'integer'].includes(pk.type as string))
      c.add('/primaryKey', 'must be a string or integer property');
  }
  return c.errors;
}

export function checkLinkType(body: Json, apiName: string, schema: SchemaDocument): FieldError[] {
  const c = new Collector();
  if (!isObject(body)) return [{ path: '/', message: 'must be an object' }];
  c.only('', body, ['apiName', 'displayName', 'from', 'to', 'cardinality']);
  c.name('/apiName', apiName);
  if (body.apiName !== undefined && body.apiName !== apiName) c.add('/apiName', `must equal the path's ${apiName}`);
  c.optionalString('/displayName', body.displayName, 200);
  for (const end of ['from', 'to'] as const) {
    const v = body[end];
    if (typeof v !== 'string') c.add(`/${end}`, 'must name an object type');
    else if (!Object.hasOwn(schema.objectTypes, v)) c.add(`/${end}`, `object type ${JSON.stringify(v)} does not exist`);
  }
  if (!(CARDINALITIES as readonly Json[]).includes(body.cardinality)) {
    c.add('/cardinality', `must be one of ${CARDINALITIES.join(', ')}`);
  }
  return c.errors;
}

const EDIT_OPS = ['createObject', 'modifyObject', 'deleteObject', 'createLink', 'deleteLink'];

export function checkActionType(body: Json, apiName: string, schema: SchemaDocument): FieldError[] {
  const c = new Collector();
  if (!isObject(body)) return [{ path: '/', message: 'must be an object' }];
  c.only('', body, ['apiName', 'displayName', 'description', 'parameters', 'edits', 'idempotencyKey']);
  c.name('/apiName', apiName);
  if (body.apiName !== undefined && body.apiName !== apiName) c.add('/apiName', `must equal the path's ${apiName}`);
  c.optionalString('/displayName', body.displayName, 200);
  c.optionalString('/description', body.description);
  const params = isObject(body.parameters) ? body.parameters : {};
  if (body.parameters !== undefined && !isObject(body.parameters)) c.add('/parameters', 'must be an object');
  for (const [name, def] of Object.entries(params)) {
    const p = `/parameters/${esc(name)}`;
    if (!checkTypedEntry(c, p, name, def, ['type', 'required', 'description'])) continue;
    checkPropertyType(c, `${p}/type`, def.type);
    c.optionalBoolean(`${p}/required`, def.required);
  }
  const source = (path: string, v: Json) => {
    if (isObject(v) && typeof v.param === 'string' && Object.keys(v).length === 1) {
      if (!(v.param in params)) c.add(`${path}/param`, `parameter ${JSON.stringify(v.param)} is not declared`);
    } else if (!(isObject(v) && 'value' in v && Object.keys(v).length === 1)) {
      c.add(path, 'must be {"param": name} or {"value": constant}');
    }
  };
  if (!Array.isArray(body.edits) || body.edits.length === 0 || body.edits.length > 100) {
    c.add('/edits', 'must list 1 to 100 edits');
  } else {
    for (const [i, edit] of (body.edits as Json[]).entries()) {
      const p = `/edits/${i}`;
      if (!isObject(edit) || !EDIT_OPS.includes(edit.op as string)) {
        c.add(`${p}/op`, `must be one of ${EDIT_OPS.join(', ')}`);
        continue;
      }
      if (edit.op === 'createLink' || edit.op === 'deleteLink') {
        c.only(p, edit, ['op', 'linkType', 'from', 'to']);
        if (typeof edit.linkType !== 'string' || !Object.hasOwn(schema.linkTypes, edit.linkType)) {
          c.add(`${p}/linkType`, `link type ${JSON.stringify(edit.linkType)} does not exist`);
        }
        source(`${p}/from`, edit.from);
        source(`${p}/to`, edit.to);
        continue;
      }
      c.only(p, edit, edit.op === 'deleteObject' ? ['op', 'objectType', 'pk'] : ['op', 'objectType', 'pk', 'values']);
      const type =
        typeof edit.objectType === 'string' && Object.hasOwn(schema.objectTypes, edit.objectType)
          ? schema.objectTypes[edit.objectType]
          : undefined;
      if (!type) {
        c.add(`${p}/objectType`, `object type ${JSON.stringify(edit.objectType)} does not exist`);
        continue;
      }
      source(`${p}/pk`, edit.pk);
      if (edit.op === 'deleteObject') continue;
      if (!isObject(edit.values)) {
        c.add(`${p}/values`, 'must map properties to {"param"} or {"value"}');
        continue;
      }
      for (const [prop, v] of Object.entries(edit.values)) {
        if (!Object.hasOwn(type.properties, prop))
          c.add(`${p}/values/${esc(prop)}`, `property ${JSON.stringify(prop)} does not exist on ${type.apiName}`);
        else source(`${p}/values/${esc(prop)}`, v);
      }
    }
  }
  if (body.idempotencyKey !== undefined) {
    if (!Array.isArray(body.idempotencyKey) || body.idempotencyKey.length === 0)
      c.add('/idempotencyKey', 'must list parameters');
    else
      body.idempotencyKey.forEach((k: Json, i: number) => {
        if (typeof k !== 'string' || !Object.hasOwn(params, k))
          c.add(`/idempotencyKey/${i}`, `parameter ${JSON.stringify(k)} is not declared`);
      });
  }
  return c.errors;
}

/** What still refers to an object type or link type; deleting it is refused while anything does. */
export function usesOf(schema: SchemaDocument, kind: 'objectType' | 'linkType', apiName: string): FieldError[] {
  const uses: FieldError[] = [];
  if (kind === 'objectType') {
    for (const link of Object.values(schema.linkTypes)) {
      if (link.from === apiName || link.to === apiName) {
        uses.push({ path: `/linkTypes/${link.apiName}`, message: `link type ${link.apiName} still uses ${apiName}` });
      }
    }
  }
  for (const action of Object.values(schema.actionTypes)) {
    action.edits.forEach((edit, i) => {
      const target = 'objectType' in edit ? edit.objectType : edit.linkType;
      const matches = kind === 'objectType' ? 'objectType' in edit : 'linkType' in edit;
      if (matches && target === apiName) {
        uses.push({
          path: `/actionTypes/${action.apiName}/edits/${i}`,
          message: `action type ${action.apiName} still uses ${apiName}`,
        });
      }
    });
  }
  return uses;
}

// ---------------------------------------------------------------- diff

export interface Change {
  path: string;
  change: 'added' | 'removed' | 'changed';
  breaking: boolean;
  reason?: string;
}

export interface SchemaDiff {
  changes: Change[];
  breaking: boolean;
}

// Documents come back from jsonb with their keys reordered: compare canonical forms.
const same = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

/** A structured diff; changes that stored data may no longer satisfy are marked breaking. */
export function diffSchemas(before: SchemaDocument, after: SchemaDocument): SchemaDiff {
  const changes: Change[] = [];
  for (const kind of ['objectTypes', 'linkTypes', 'actionTypes'] as const) {
    const b = before[kind] as Record<string, unknown>;
    const a = after[kind] as Record<string, unknown>;
    for (const name of Object.keys(b)) {
      if (!Object.hasOwn(a, name)) {
        changes.push({
          path: `/${kind}/${name}`,
          change: 'removed',
          breaking: kind !== 'actionTypes',
          reason: 'removed',
        });
      }
    }
    for (const name of Object.keys(a)) {
      if (!Object.hasOwn(b, name)) changes.push({ path: `/${kind}/${name}`, change: 'added', breaking: false });
      else if (!same(a[name], b[name])) {
        if (kind === 'objectTypes') changes.push(...diffObjectType(b[name] as ObjectType, a[name] as ObjectType));
        else if (kind === 'linkTypes') {
          const [lb, la] = [b[name] as LinkType, a[name] as LinkType];
          const narrowed =
            lb.from !== la.from ||
            lb.to !== la.to ||
            CARDINALITIES.indexOf(la.cardinality) < CARDINALITIES.indexOf(lb.cardinality);
          changes.push({
            path: `/linkTypes/${name}`,
            change: 'changed',
            breaking: narrowed,
            ...(narrowed ? { reason: 'ends or cardinality narrowed' } : {}),
          });
        } else changes.push({ path: `/actionTypes/${name}`, change: 'changed', breaking: false });
      }
    }
  }
  return { changes, breaking: changes.some((c) => c.breaking) };
}

/** A series keeps its points for less time than before (absent: forever). */
const shortened = (before: string | undefined, after: string | undefined) =>
  after !== undefined && (before === undefined || (retentionMs(after) ?? 0) < (retentionMs(before) ?? 0));

function diffObjectType(b: ObjectType, a: ObjectType): Change[] {
  const base = `/objectTypes/${a.apiName}`;
  const changes: Change[] = [];
  if (b.primaryKey !== a.primaryKey) {
    changes.push({ path: `${base}/primaryKey`, change: 'changed', breaking: true, reason: 'primary key changed' });
  }
  for (const name of Object.keys(b.properties)) {
    if (!Object.hasOwn(a.properties, name)) {
      changes.push({
        path: `${base}/properties/${name}`,
        change: 'removed',
        breaking: true,
        reason: 'property removed',
      });
    }
  }
  for (const [name, def] of Object.entries(a.properties)) {
    const old = Object.hasOwn(b.properties, name) ? b.properties[name] : undefined;
    const p = `${base}/properties/${name}`;
    if (!old) {
      const breaking = def.required === true;
      changes.push({ path: p, change: 'added', breaking, ...(breaking ? { reason: 'new required property' } : {}) });
    } else if (!same(old.type, def.type)) {
      changes.push({ path: `${p}/type`, change: 'changed', breaking: true, reason: 'property type changed' });
    } else if (isSeriesType(def.type) && shortened(old.retention, def.retention)) {
      changes.push({
        path: `${p}/retention`,
        change: 'changed',
        breaking: true,
        reason: 'retention shortened: older points are dropped',
      });
    } else if (!old.required && def.required) {
      changes.push({ path: `${p}/required`, change: 'changed', breaking: true, reason: 'property became required' });
    } else if (!same(old, def)) {
      changes.push({ path: p, change: 'changed', breaking: false });
    }
  }
  for (const field of ['displayName', 'description'] as const) {
    if (b[field] !== a[field]) changes.push({ path: `${base}/${field}`, change: 'changed', breaking: false });
  }
  return changes;
}

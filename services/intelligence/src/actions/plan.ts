/**
 * What running an action type means before anything runs: its parameters checked against their
 * declared types, its edits resolved into the commands data will apply, the fingerprint that
 * tells one request from another under an idempotency key, and how each completed command is
 * undone. Pure: no I/O.
 */
import { createHash } from 'node:crypto';
import {
  type ActionType,
  type CommandResult,
  canonicalJson,
  checkValue,
  type FieldError,
  isPlainObject,
  ownValue,
  pointer,
  type StepCommand,
  setOwn,
  stringFault,
  type ValueSource,
} from '@onto/shared';

/** Characters in a primary key (data's limit). */
const PK_LENGTH = 512;

export interface CheckedParameters {
  parameters: Record<string, unknown>;
  errors: FieldError[];
}

/**
 * The body's parameters against the action type's: known names only, each of its type (instants
 * normalised to UTC, as data stores them), the required ones present. null means "not given".
 */
export function checkParameters(action: ActionType, input: unknown): CheckedParameters {
  const errors: FieldError[] = [];
  const parameters: Record<string, unknown> = {};
  if (input === undefined) input = {};
  if (!isPlainObject(input)) return { parameters, errors: [{ path: '/parameters', message: 'must be an object' }] };
  for (const [name, value] of Object.entries(input)) {
    const path = `/parameters/${pointer(name)}`;
    const def = Object.hasOwn(action.parameters, name) ? action.parameters[name] : undefined;
    if (!def) {
      errors.push({ path, message: `is not a parameter of ${action.apiName}` });
      continue;
    }
    if (value === null) continue;
    const checked = checkValue(def.type, value, path, errors);
    if (checked !== undefined) setOwn(parameters, name, checked);
  }
  for (const [name, def] of Object.entries(action.parameters)) {
    // Own values only: a required `constructor` left out is missing, not Object.
    if (def.required && ownValue(input, name) == null) {
      errors.push({ path: `/parameters/${pointer(name)}`, message: 'is required' });
    }
  }
  return { parameters, errors };
}

/** Where a value of an edit comes from, for messages: the parameter, or the edit's constant. */
const sourcePath = (source: ValueSource, editPath: string) =>
  'param' in source ? `/parameters/${pointer(source.param)}` : editPath;

const sourceValue = (source: ValueSource, parameters: Record<string, unknown>): unknown =>
  // A parameter the request left out is absent, not a prototype member named like it (`constructor`).
  'param' in source ? (Object.hasOwn(parameters, source.param) ? parameters[source.param] : undefined) : source.value;

/** A value that names an object: a non-empty string or a safe integer, as text. */
function keyOf(
  source: ValueSource,
  parameters: Record<string, unknown>,
  path: string,
  what: string,
  errors: FieldError[],
): string {
  const v = sourceValue(source, parameters);
  if (v === undefined || v === null) {
    errors.push({ path: sourcePath(source, path), message: `is required: it names ${what}` });
    return '';
  }
  if (typeof v !== 'string' && !(typeof v === 'number' && Number.isSafeInteger(v))) {
    errors.push({ path: sourcePath(source, path), message: `names ${what}: must be a string or an integer` });
    return '';
  }
  const key = String(v);
  const fault = key.length === 0 ? 'must not be empty' : stringFault(key, PK_LENGTH);
  if (fault) errors.push({ path: sourcePath(source, path), message: `names ${what}: ${fault}` });
  return key;
}

/**
 * The action type's edits as commands on concrete objects and links, one per edit, in order.
 * Values come from the checked parameters or the edit's constants; a parameter not given leaves
 * its property out (untouched by a modify). The values themselves are data's to check.
 */
export function resolveCommands(
  action: ActionType,
  parameters: Record<string, unknown>,
): { commands: StepCommand[]; errors: FieldError[] } {
  const errors: FieldError[] = [];
  const commands = action.edits.map((edit, i): StepCommand => {
    const at = `/actionType/edits/${i}`;
    if ('linkType' in edit) {
      return {
        op: edit.op,
        linkType: edit.linkType,
        from: keyOf(edit.from, parameters, `${at}/from`, `the from end of ${edit.linkType}`, errors),
        to: keyOf(edit.to, parameters, `${at}/to`, `the to end of ${edit.linkType}`, errors),
      };
    }
    const pk = keyOf(edit.pk, parameters, `${at}/pk`, `the ${edit.objectType} to ${edit.op}`, errors);
    if (!('values' in edit)) return { op: 'deleteObject', objectType: edit.objectType, pk };
    const properties: Record<string, unknown> = {};
    for (const [property, source] of Object.entries(edit.values)) {
      const v = sourceValue(source, parameters);
      if (v !== undefined) setOwn(properties, property, v);
    }
    return { op: edit.op, objectType: edit.objectType, pk, properties };
  });
  return { commands, errors };
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** What makes two requests under one idempotency key the same request. */
export const fingerprint = (worldId: string, actionType: string, parameters: unknown) =>
  sha256(canonicalJson({ world: worldId, actionType, parameters: parameters ?? {} }));

/**
 * The action type's own idempotency key (its `idempotencyKey` parameters), or null when it
 * declares none: one execution per world, action type and values of those parameters.
 */
export function naturalKey(action: ActionType, parameters: Record<string, unknown>): string | null {
  if (!action.idempotencyKey || action.idempotencyKey.length === 0) return null;
  return sha256(
    canonicalJson(
      action.idempotencyKey.map((name) => [name, Object.hasOwn(parameters, name) ? (parameters[name] ?? null) : null]),
    ),
  );
}

/** The object or link a command writes. */
export const entityOf = (c: StepCommand): string =>
  'objectType' in c ? `object/${c.objectType}/${c.pk}` : `link/${c.linkType}/${c.from}/${c.to}`;

/**
 * The version of each object and link as the saga's own writes left it, replaying what data
 * answered in the order it happened: what an undo must find, so that two steps writing one
 * object undo in turn, while a write by anyone else in between makes data refuse the undo.
 */
export function sagaVersions(history: { commands: StepCommand[]; results: CommandResult[] }[]): Map<string, number> {
  const versions = new Map<string, number>();
  for (const { commands, results } of history) {
    for (const [i, command] of commands.entries()) {
      const result = results[i];
      if (!result || result.version === null) continue;
      versions.set(entityOf(command), result.version);
      for (const l of result.removedLinks ?? []) versions.set(`link/${l.linkType}/${l.from}/${l.to}`, l.version);
    }
  }
  return versions;
}

/**
 * The commands that undo a completed forward command, given data's result; null when it changed
 * nothing. Each names the version the saga's writes left (`versions`, else the command's own), so
 * that an object changed since by someone else is not blindly overwritten: data refuses, and the
 * saga fails instead.
 */
export function compensationOf(
  command: StepCommand,
  result: CommandResult,
  versions: Map<string, number> = new Map(),
): StepCommand[] | null {
  if (!result.changed || result.version === null) return null;
  const ifVersion = versions.get(entityOf(command)) ?? result.version;
  switch (command.op) {
    case 'createObject':
      return [{ op: 'deleteObject', objectType: command.objectType, pk: command.pk, ifVersion }];
    case 'modifyObject':
    case 'replaceObject': {
      const before = result.before;
      if (!before || before.deleted || !before.properties) {
        return [{ op: 'deleteObject', objectType: command.objectType, pk: command.pk, ifVersion }];
      }
      return [
        {
          op: 'replaceObject',
          objectType: command.objectType,
          pk: command.pk,
          properties: before.properties,
          ifVersion,
        },
      ];
    }
    case 'deleteObject': {
      const properties = result.before?.properties;
      if (!properties) return null;
      return [
        { op: 'replaceObject', objectType: command.objectType, pk: command.pk, properties, ifVersion },
        ...(result.removedLinks ?? []).map(
          (l): StepCommand => ({
            op: 'createLink',
            linkType: l.linkType,
            from: l.from,
            to: l.to,
            ifVersion: versions.get(`link/${l.linkType}/${l.from}/${l.to}`) ?? l.version,
          }),
        ),
      ];
    }
    case 'createLink':
      return [{ op: 'deleteLink', linkType: command.linkType, from: command.from, to: command.to, ifVersion }];
    case 'deleteLink':
      return [{ op: 'createLink', linkType: command.linkType, from: command.from, to: command.to, ifVersion }];
  }
}

import { eventSchema } from './asyncapi.js';
import { EVENT_SCHEMA_VERSION } from './contract.js';
import { EVENT_TYPES, type EventType } from './envelope.js';

/**
 * Compatibility of the event schemas with a previous release's (docs/adr/0020): within a version
 * an event type may only gain optional fields (or enum values). A consumer written against the
 * old schema still reads every new event, and one written against the new schema still reads the
 * old events a topic retains.
 */

type Schema = Record<string, unknown>;

/** The schemas a release publishes: every event type's record schema at its version. */
export interface SchemaLock {
  events: Record<string, { version: number; schema: Schema }>;
}

export function currentSchemaLock(): SchemaLock {
  const types = Object.keys(EVENT_TYPES).sort() as EventType[];
  return {
    events: Object.fromEntries(types.map((t) => [t, { version: EVENT_SCHEMA_VERSION, schema: eventSchema(t) }])),
  };
}

export interface BreakingChange {
  type: string;
  path: string;
  change: string;
}

const variants = (s: Schema): Schema[] => (Array.isArray(s.anyOf) ? (s.anyOf as Schema[]) : [s]);
const label = (s: Schema) =>
  'const' in s
    ? JSON.stringify(s.const)
    : typeof s.type === 'string'
      ? s.type
      : Object.keys(s).length
        ? 'schema'
        : 'any';

/** What makes `after` accept less, or promise less, than `before`, at `path`. */
function compare(before: Schema, after: Schema, path: string, out: (path: string, change: string) => void): void {
  // A schema that accepts anything (`{}`, or a description only) promises nothing: any change to it is allowed.
  const open = (s: Schema) => !('type' in s) && !('anyOf' in s) && !('const' in s);
  if (open(before)) return;
  if (open(after)) {
    out(path, `was ${label(before)}, is now any value`);
    return;
  }
  if (Array.isArray(before.anyOf) || Array.isArray(after.anyOf)) {
    const now = variants(after);
    for (const old of variants(before)) {
      // Each value the old schema allowed is still allowed by one variant, with nothing of it lost.
      const found = now.filter((n) => label(n) === label(old));
      if (found.length === 0) {
        out(path, `no longer allows ${label(old)} (allows ${now.map(label).join(' | ')})`);
        continue;
      }
      // Of the variants of the same kind (a union of objects), the closest one: fewest faults.
      let closest: [string, string][] | undefined;
      for (const candidate of found) {
        const faults: [string, string][] = [];
        compare(old, candidate, path, (p, c) => faults.push([p, c]));
        if (!closest || faults.length < closest.length) closest = faults;
      }
      for (const [p, c] of closest ?? []) out(p, c);
    }
    return;
  }
  if ('const' in before || 'const' in after) {
    if (JSON.stringify(before.const) !== JSON.stringify(after.const)) {
      out(path, `was ${label(before)}, is now ${label(after)}`);
    }
    return;
  }
  if (before.type !== after.type) {
    out(path, `type was ${label(before)}, is now ${label(after)}`);
    return;
  }
  for (const bound of ['minimum', 'minLength', 'minItems'] as const) {
    const [b, a] = [before[bound] as number | undefined, after[bound] as number | undefined];
    if (a !== undefined && (b === undefined || a > b)) out(path, `${bound} raised from ${b ?? 'none'} to ${a}`);
  }
  for (const bound of ['maximum', 'maxLength', 'maxItems'] as const) {
    const [b, a] = [before[bound] as number | undefined, after[bound] as number | undefined];
    if (a !== undefined && (b === undefined || a < b)) out(path, `${bound} lowered from ${b ?? 'none'} to ${a}`);
  }
  if (after.pattern !== undefined && after.pattern !== before.pattern) {
    out(path, `pattern changed from ${JSON.stringify(before.pattern ?? null)} to ${JSON.stringify(after.pattern)}`);
  }
  if (before.type === 'array' && before.items && after.items) {
    compare(before.items as Schema, after.items as Schema, `${path}[]`, out);
  }
  if (before.type !== 'object') return;
  const [bp, ap] = [
    (before.properties ?? {}) as Record<string, Schema>,
    (after.properties ?? {}) as Record<string, Schema>,
  ];
  const [br, ar] = [new Set((before.required ?? []) as string[]), new Set((after.required ?? []) as string[])];
  for (const [name, schema] of Object.entries(bp)) {
    const at = `${path}/${name}`;
    const now = Object.hasOwn(ap, name) ? ap[name] : undefined;
    if (!now) {
      out(at, 'field removed');
      continue;
    }
    if (br.has(name) && !ar.has(name)) out(at, 'field no longer required: consumers may rely on it');
    compare(schema, now, at, out);
  }
  for (const name of ar) if (!br.has(name)) out(`${path}/${name}`, 'field newly required: older events lack it');
  const [bx, ax] = [before.additionalProperties, after.additionalProperties];
  if (bx !== undefined && bx !== false && typeof bx === 'object' && typeof ax === 'object') {
    compare(bx as Schema, ax as Schema, `${path}/*`, out);
  } else if (bx !== false && ax === false) {
    out(path, 'no longer accepts fields it does not declare');
  }
}

/** Every breaking change from `previous` to `current`: removed types, and each type's schema at the same version. */
export function breakingChanges(previous: SchemaLock, current: SchemaLock): BreakingChange[] {
  const found: BreakingChange[] = [];
  for (const [type, old] of Object.entries(previous.events)) {
    const now = Object.hasOwn(current.events, type) ? current.events[type] : undefined;
    if (!now) {
      found.push({ type, path: '', change: `event type removed (v${old.version})` });
      continue;
    }
    // A new version is a new type produced beside the old one for a while (docs/adr/0020).
    if (now.version !== old.version) {
      found.push({ type, path: '', change: `v${old.version} replaced by v${now.version}: produce both, as two types` });
      continue;
    }
    compare(old.schema, now.schema, '', (path, change) => found.push({ type, path, change }));
  }
  return found;
}

const versionOf = (lock: SchemaLock, type: string) =>
  Object.hasOwn(lock.events, type) ? lock.events[type]?.version : undefined;

/** The report a person reads: one line per breaking change, or that there is none. */
export function compatibilityReport(previous: SchemaLock, current: SchemaLock): { ok: boolean; text: string } {
  const breaking = breakingChanges(previous, current);
  const added = Object.keys(current.events).filter((t) => !(t in previous.events));
  const lines = breaking.map(
    (b) =>
      `BREAKING ${b.type} v${versionOf(current, b.type) ?? versionOf(previous, b.type)}${b.path ? ` ${b.path}` : ''}: ${b.change}`,
  );
  if (added.length > 0) lines.push(`new event types: ${added.join(', ')}`);
  lines.push(
    breaking.length === 0
      ? `compatible: ${Object.keys(previous.events).length} event types checked against the previous release`
      : `${breaking.length} breaking change(s): give the changed type a new version instead (docs/adr/0020)`,
  );
  return { ok: breaking.length === 0, text: lines.join('\n') };
}

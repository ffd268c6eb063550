import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';

/** How the rows of one CDC source become objects of one type in one world. */
export const CdcMapping = Type.Object(
  {
    source: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$', description: 'read from cdc.raw.<source>' }),
    world: Type.String({ minLength: 1 }),
    objectType: Type.String({ pattern: NAME }),
    primaryKey: Type.String({ minLength: 1, description: 'the column holding the primary key' }),
    properties: Type.Record(Type.String({ pattern: NAME }), Type.String({ minLength: 1 }), {
      description: 'property name → column name',
    }),
  },
  { additionalProperties: false },
);
export type CdcMapping = Static<typeof CdcMapping>;

/** `CDC_MAPPINGS`, checked: a JSON array of mappings, one per source. Throws at startup when wrong. */
export function parseMappings(raw: string): CdcMapping[] {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    throw new Error(`CDC_MAPPINGS is not JSON: ${(e as Error).message}`);
  }
  const schema = Type.Array(CdcMapping);
  if (!Value.Check(schema, value)) {
    const first = Value.Errors(schema, value).First();
    throw new Error(`CDC_MAPPINGS is invalid at ${first?.path ?? '/'}: ${first?.message ?? 'unknown'}`);
  }
  const sources = new Set<string>();
  for (const m of value) {
    if (sources.has(m.source)) throw new Error(`CDC_MAPPINGS maps source ${m.source} twice`);
    sources.add(m.source);
  }
  return value;
}

export const cdcTopic = (source: string) => `cdc.raw.${source}`;

/** A Debezium change event, unwrapped from the JSON converter's `{schema, payload}` when needed. */
export interface ChangeRecord {
  op: 'c' | 'u' | 'd' | 'r';
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
  /** lsn when the source gives one, else ts_ms (of the source, else of the record). */
  position: bigint;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const integer = (v: unknown): bigint | undefined => {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  if (typeof v === 'string' && /^[0-9]{1,30}$/.test(v)) return BigInt(v);
  return undefined;
};

/** The change in a record's value; null for a Kafka tombstone (nothing to do); throws when malformed. */
export function parseRecord(value: Buffer | null): ChangeRecord | null {
  if (value === null || value.length === 0) return null;
  let raw: unknown = JSON.parse(value.toString('utf8'));
  if (isObject(raw) && 'payload' in raw && !('op' in raw)) raw = raw.payload;
  if (raw === null) return null;
  if (!isObject(raw)) throw new Error('the change event is not an object');
  const op = raw.op;
  if (op !== 'c' && op !== 'u' && op !== 'd' && op !== 'r') throw new Error(`unknown op ${JSON.stringify(op)}`);
  const before = raw.before ?? null;
  const after = raw.after ?? null;
  if (before !== null && !isObject(before)) throw new Error('before must be an object or null');
  if (after !== null && !isObject(after)) throw new Error('after must be an object or null');
  if (op === 'd' ? before === null : after === null) {
    throw new Error(op === 'd' ? 'a delete needs before' : `op ${op} needs after`);
  }
  const source = isObject(raw.source) ? raw.source : {};
  const position = integer(source.lsn) ?? integer(source.ts_ms) ?? integer(raw.ts_ms);
  if (position === undefined) throw new Error('the change event has no source position (source.lsn or ts_ms)');
  return { op, before, after, position };
}

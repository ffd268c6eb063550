/**
 * What generated code relies on in a world's schema, as a flat signature (`path` → canonical
 * JSON), and the check that the schema has not moved incompatibly since: a type, property, link
 * or parameter the code names is gone or changed, or a new required one would be left out.
 */

/** As much of control's `GET /v1/worlds/{world}/schema` as the signature reads. */
export interface SchemaDocument {
  version: number;
  objectTypes: Record<
    string,
    { primaryKey: string; properties: Record<string, { type: unknown; required?: boolean }> }
  >;
  linkTypes: Record<string, { from: string; to: string; cardinality?: string }>;
  actionTypes: Record<string, { parameters?: Record<string, { type: unknown; required?: boolean }> }>;
}

/** JSON with sorted keys: one spelling per value. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const esc = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

/** Every entry generated code depends on, by JSON path into the schema. */
export function signatureOf(schema: SchemaDocument): Record<string, string> {
  // A null-prototype record: the schema's names are the world owner's text.
  const out: Record<string, string> = Object.create(null);
  for (const [name, type] of Object.entries(schema.objectTypes)) {
    out[`/objectTypes/${esc(name)}/primaryKey`] = canonical(type.primaryKey);
    for (const [p, def] of Object.entries(type.properties)) {
      out[`/objectTypes/${esc(name)}/properties/${esc(p)}`] = canonical({ type: def.type, required: !!def.required });
    }
  }
  for (const [name, link] of Object.entries(schema.linkTypes)) {
    out[`/linkTypes/${esc(name)}`] = canonical({ from: link.from, to: link.to });
  }
  for (const [name, action] of Object.entries(schema.actionTypes)) {
    out[`/actionTypes/${esc(name)}`] = canonical({});
    for (const [p, def] of Object.entries(action.parameters ?? {})) {
      out[`/actionTypes/${esc(name)}/parameters/${esc(p)}`] = canonical({ type: def.type, required: !!def.required });
    }
  }
  return out;
}

export interface SchemaDrift {
  path: string;
  /** What the code was generated with, and what the world has now (undefined: absent). */
  generated: string | undefined;
  current: string | undefined;
}

/**
 * The incompatible changes from `generated` to `current`: an entry gone or different, or a new
 * required property or parameter under a type the code knows. Additions otherwise are compatible.
 */
export function drift(generated: Record<string, string>, current: Record<string, string>): SchemaDrift[] {
  const out: SchemaDrift[] = [];
  for (const [path, value] of Object.entries(generated)) {
    const now = Object.hasOwn(current, path) ? current[path] : undefined;
    if (now !== value) out.push({ path, generated: value, current: now });
  }
  for (const [path, value] of Object.entries(current)) {
    if (path in generated) continue;
    const owner = path.replace(/\/(properties|parameters)\/[^/]+$/, '');
    const known = Object.keys(generated).some((p) => p.startsWith(`${owner}/`) || p === owner);
    if (owner !== path && known && (JSON.parse(value) as { required?: boolean }).required) {
      out.push({ path, generated: undefined, current: value });
    }
  }
  return out;
}

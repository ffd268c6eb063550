import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../services/control/test/control-service.js';
import { dataStack, type Stack } from '../services/data/test/stack.js';

/**
 * Every operation of every service fuzzed from the service's own OpenAPI document (issue 19): the
 * requests come from the document's parameter and body schemas, never from a list per route.
 * A fixed seed keeps a failing run reproducible.
 */

type Schema = Record<string, unknown> & {
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  $ref?: string;
};
interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
  schema?: Schema;
}
interface Operation {
  parameters?: Parameter[];
  requestBody?: { content?: Record<string, { schema?: Schema }> };
  responses?: Record<string, { content?: Record<string, { schema?: Schema }> }>;
}
type Document = { paths: Record<string, Record<string, Operation>>; components?: { schemas?: Record<string, Schema> } };

const SEED = 0x19;
const REQUESTS_PER_SERVICE = 2000;
/** No documented operation of these services takes this long to answer one request. */
const ANSWER_WITHIN_MS = 20_000;
const WORLD = 'fuzz';
const JS_NAMES = ['constructor', '__proto__', 'prototype', 'valueOf', 'toString', 'hasOwnProperty', 'then'];
/** Identifiers the stack knows, tried first so that requests reach past "not found". */
const KNOWN = [WORLD, 'Order', 'Customer', 'placedBy', 'o-1', 'admin', 'main', '1'];
/** Most valid path parameters name what the stack has, by the parameter's name, to reach past 404. */
const KNOWN_BY_NAME: [string, string][] = [
  ['world', WORLD],
  ['linktype', 'placedBy'],
  ['type', 'Order'],
  ['user', 'admin'],
];
/** Header values, kept for a header when its documented pattern admits them (valid) or not (broken). */
const HEADER_VALUES = [
  '"1"',
  '1',
  'W/"2"',
  '*',
  'data=1',
  'control=1, data=2',
  '0190a8e4-7b1c-7c3d-8e4f-0123456789ab',
  'key-1',
  '"quoted-key"',
  'not a version',
  'data=x',
  '""',
  'é',
  '12345678-1234-1234-1234-123456789abc',
];
/**
 * Rules between query parameters that their descriptions state and OpenAPI cannot: a request that
 * breaks one is not one the document allows.
 */
const CROSS_PARAMETER: Record<string, (query: Record<string, string>) => boolean> = {
  'GET /v1/worlds/{world}/diff': (q) =>
    q.against === undefined ? q.from !== undefined : q.from === undefined && q.to === undefined,
  'GET /v1/worlds/{world}/series/{type}/{pk}/{series}': (q) => (q.bucket === undefined) === (q.agg === undefined),
  'GET /v1/audit': (q) => q.from === undefined || q.to === undefined || Date.parse(q.from) < Date.parse(q.to),
};
/** Opaque tokens a listing issued (`next`): the document says so, and no generator can make one. */
const OPAQUE = new Set(['cursor', 'pageToken']);
/** Refusals that depend on the world's schema (which properties exist, are indexed), not on the document. */
const WORLD_DEPENDENT = /is not a property|is not indexed|only eq applies|an indexed property of|is not a link type/;
/**
 * The nesting limit of every JSON body, stated by the 400 every operation with a body documents
 * (docs/adr/0036): JSON Schema cannot say it, so a body nested deeper is not one the document allows.
 */
const JSON_MAX_DEPTH = 64;
const depthOf = (value: unknown): number =>
  value !== null && typeof value === 'object'
    ? 1 + Math.max(0, ...Object.values(value as Record<string, unknown>).map(depthOf))
    : 0;
const ODD_SEGMENTS = ['', 'a'.repeat(300), '%00', '..', '%2F', 'é', '日本', ' ', '-1', '9'.repeat(30), "'; --"];

/** mulberry32: small, deterministic, good enough to pick among cases. */
function random(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (min: number, max: number) => min + Math.floor(next() * (max - min + 1)),
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T,
  };
}
type Random = ReturnType<typeof random>;

function resolve(doc: Document, schema: Schema | undefined): Schema {
  let s = schema ?? {};
  while (s.$ref) s = doc.components?.schemas?.[s.$ref.split('/').pop() as string] ?? {};
  return s;
}

function matches(schema: Schema, value: string): boolean {
  if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern, 'u').test(value)) return false;
  if (typeof schema.minLength === 'number' && value.length < schema.minLength) return false;
  if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) return false;
  return true;
}

/** A value meant to satisfy `schema`; strings under a pattern are drawn from known identifiers. */
function valid(doc: Document, raw: Schema | undefined, r: Random, depth = 0): unknown {
  const schema = resolve(doc, raw);
  if ('const' in schema) return schema.const;
  if (schema.enum) return r.pick(schema.enum);
  const union = schema.anyOf ?? schema.oneOf;
  if (union) return valid(doc, r.pick(union), r, depth);
  if (schema.allOf) return Object.assign({}, ...schema.allOf.map((s) => valid(doc, s, r, depth)));
  const type = Array.isArray(schema.type) ? r.pick(schema.type) : schema.type;
  switch (type) {
    case 'string': {
      if (schema.format === 'date-time') return new Date(1_700_000_000_000 + r.int(0, 1e9)).toISOString();
      const instant = new Date(1_700_000_000_000 + r.int(0, 1e9) * 1000).toISOString().replace('.000', '');
      const candidates = [...KNOWN, `x${r.int(0, 999)}`, 'abc', 'a-b_c.d', instant, '1h', '15m', 'amount:gt:5'].filter(
        (c) => matches(schema, c),
      );
      if (candidates.length) return r.pick(candidates);
      return 'x'.repeat(typeof schema.minLength === 'number' ? schema.minLength : 1);
    }
    case 'integer':
    case 'number': {
      const min = typeof schema.minimum === 'number' ? schema.minimum : 0;
      const max = typeof schema.maximum === 'number' ? schema.maximum : min + 100;
      return r.int(Math.ceil(min), Math.floor(Math.min(max, min + 1000)));
    }
    case 'boolean':
      return r.next() < 0.5;
    case 'null':
      return null;
    case 'array': {
      if (depth > 4) return [];
      const min = typeof schema.minItems === 'number' ? schema.minItems : 0;
      return Array.from({ length: Math.min(min + r.int(0, 2), (schema.maxItems as number | undefined) ?? 3) }, () =>
        valid(doc, schema.items, r, depth + 1),
      );
    }
    case 'object': {
      if (depth > 4) return {};
      const out: Record<string, unknown> = {};
      for (const [name, prop] of Object.entries(schema.properties ?? {})) {
        if (schema.required?.includes(name) || r.next() < 0.5) out[name] = valid(doc, prop, r, depth + 1);
      }
      return out;
    }
    default:
      return r.pick(['x', 1, true, {}]);
  }
}

/** Values meant to break `schema`: out of bounds, wrong types, JavaScript property names. */
function invalidScalar(doc: Document, raw: Schema | undefined, r: Random): unknown {
  const schema = resolve(doc, raw);
  const cases: unknown[] = [...JS_NAMES, ...ODD_SEGMENTS, 'true', 'null', '1e309', '-0', '0x10', '[]', '{}'];
  if (typeof schema.minimum === 'number') cases.push(schema.minimum - 1, Number.MIN_SAFE_INTEGER);
  if (typeof schema.maximum === 'number') cases.push(schema.maximum + 1, Number.MAX_SAFE_INTEGER * 10);
  if (typeof schema.maxLength === 'number') cases.push('z'.repeat(schema.maxLength + 1));
  return r.pick(cases);
}

function deep(levels: number): unknown {
  let value: unknown = 'bottom';
  for (let i = 0; i < levels; i++) value = { nested: value };
  return value;
}

/** A body: a valid instance, or one mutated to break the schema in one way. */
function body(doc: Document, raw: Schema | undefined, r: Random): unknown {
  const schema = resolve(doc, raw);
  const base = valid(doc, schema, r);
  const mutation = r.int(0, 11);
  if (mutation <= 3) return base;
  const obj = { ...(typeof base === 'object' && base !== null && !Array.isArray(base) ? base : {}) } as Record<
    string,
    unknown
  >;
  const keys = Object.keys(schema.properties ?? {});
  const key = keys.length ? r.pick(keys) : r.pick(JS_NAMES);
  switch (mutation) {
    case 4:
      delete obj[r.pick(schema.required?.length ? schema.required : [...keys, 'x'])];
      return obj;
    case 5:
      obj[key] = r.pick([42, 'str', true, null, [], {}, -1]);
      return obj;
    case 6:
      return JSON.parse(`{${[...JS_NAMES.map((n) => `"${n}": {"x": 1}`), '"extra": 1'].join(',')}}`);
    case 7:
      obj[key] = r.pick([1e308, -1e308, 2 ** 63, Number.MAX_SAFE_INTEGER + 2, 0.1 + 0.2]);
      return obj;
    case 8:
      obj[key] = deep(r.pick([50, 500, 2000]));
      return obj;
    case 9:
      obj[key] = r.pick(['é日本\u0000\ud83d\ude00', '\u202e', 'a'.repeat(100_000)]);
      return obj;
    case 10:
      return r.pick([null, [], 'string', 12, [base]]);
    default:
      obj[r.pick(JS_NAMES)] = valid(doc, schema.properties?.[key], r);
      return obj;
  }
}

/**
 * Whether a request is one the document allows: every parameter and the body valid against their
 * schemas (query, path and header values as text, coerced as the services coerce them).
 */
function documentedValidity(text: Ajv, json: Ajv) {
  const cache = new Map<unknown, ReturnType<Ajv['compile']>>();
  const compiled = (ajv: Ajv, key: unknown, schema: () => object) => {
    let validate = cache.get(key);
    if (!validate) {
      validate = ajv.compile(schema());
      cache.set(key, validate);
    }
    return validate;
  };
  return (
    op: Operation,
    parts: {
      path: Record<string, string>;
      query: Record<string, string>;
      headers: Record<string, string>;
      body: unknown;
      bodyGiven: boolean;
      operation: string;
    },
  ) => {
    const params = op.parameters ?? [];
    for (const where of ['path', 'query', 'header'] as const) {
      const given = where === 'path' ? parts.path : where === 'query' ? parts.query : parts.headers;
      const declared = params.filter((p) => p.in === where);
      for (const p of declared) {
        const value = given[p.name];
        if (value === undefined) {
          if (p.required) return false;
          continue;
        }
        // Wrapped in an object, so that coercion applies to the value as it does to a request's.
        const validate = compiled(text, p, () => ({ type: 'object', properties: { v: p.schema ?? {} } }));
        if (!validate({ v: value })) return false;
      }
      if (where === 'query') {
        if (Object.keys(given).some((name) => !declared.some((p) => p.name === name))) return false;
        if (CROSS_PARAMETER[parts.operation]?.(given) === false) return false;
      }
    }
    const bodyContent = Object.values(op.requestBody?.content ?? {})[0];
    if (bodyContent?.schema) {
      if (!parts.bodyGiven) return !(op.requestBody as { required?: boolean }).required;
      // As sent: JSON drops what the generator set on a prototype (`__proto__` as a key).
      const sent = JSON.parse(JSON.stringify(parts.body));
      if (!compiled(json, bodyContent.schema, () => bodyContent.schema as object)(sent)) return false;
    }
    return true;
  };
}

interface Finding {
  operation: string;
  status: number;
  problem: string;
  request: string;
  response: string;
}

async function fuzz(name: string, app: FastifyInstance, mintToken: () => Promise<string>) {
  const doc = (await app.inject({ method: 'GET', url: '/docs/json' })).json() as Document;
  const r = random(SEED);
  const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: false });
  for (const [id, schema] of Object.entries(doc.components?.schemas ?? {}))
    ajv.addSchema(schema, `#/components/schemas/${id}`);
  // As the services validate (packages/shared/src/http/validation.ts): formats checked, text coerced.
  const text = addFormats.default(new Ajv({ strict: false, coerceTypes: 'array' }));
  const json = addFormats.default(new Ajv({ strict: false }));
  for (const [id, schema] of Object.entries(doc.components?.schemas ?? {})) {
    text.addSchema(schema, `#/components/schemas/${id}`);
    json.addSchema(schema, `#/components/schemas/${id}`);
  }
  const allowed = documentedValidity(text, json);
  const operations = Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops)
      .filter(([method]) => ['get', 'post', 'put', 'patch', 'delete'].includes(method))
      // A stream (SSE, docs/adr/0059) never ends: an injected request would wait for it forever.
      // live.int.spec.ts proves its refusals; the fuzzer keeps to answers that end.
      .filter(([, op]) => !JSON.stringify(op.responses?.['200'] ?? {}).includes('text/event-stream'))
      .map(([method, op]) => ({ path, method: method.toUpperCase(), op })),
  );
  const perOperation = Math.ceil(REQUESTS_PER_SERVICE / operations.length);
  const findings: Finding[] = [];
  const statuses: Record<string, number> = {};
  let sent = 0;
  let validated = 0;
  for (const { path, method, op } of operations) {
    const params = op.parameters ?? [];
    const bodyContent = Object.entries(op.requestBody?.content ?? {})[0];
    // A token per operation: signing out (DELETE /v1/auth/token) revokes only the token it presents.
    const token = await mintToken();
    for (let n = 0; n < perOperation; n++) {
      // One request in three breaks a path or query parameter; the rest keep them valid.
      const breakParams = n % 3 === 2;
      const pathValues: Record<string, string> = {};
      const url = path.replace(/\{([^}]+)\}/g, (_, p: string) => {
        const param = params.find((x) => x.in === 'path' && x.name === p);
        const known = KNOWN_BY_NAME.find(([hint]) => p.toLowerCase().includes(hint))?.[1];
        const value =
          breakParams && r.next() < 0.7
            ? invalidScalar(doc, param?.schema, r)
            : known && r.next() < 0.7
              ? known
              : valid(doc, param?.schema, r);
        // A segment of only dots (even as %2E) is removed by every URL parser (RFC 3986 dot-segments,
        // the WHATWG URL standard): no client can send it, so it stands for no value of the document.
        const encoded = /^\.{1,2}$/.test(String(value))
          ? 'dots'
          : encodeURIComponent(String(value)).replace(/%25/g, '%');
        try {
          pathValues[p] = decodeURIComponent(encoded);
        } catch {
          pathValues[p] = encoded;
        }
        return encoded;
      });
      const query = new URLSearchParams();
      for (const q of params.filter((x) => x.in === 'query')) {
        if (!q.required && r.next() < 0.5) continue;
        const value = breakParams && r.next() < 0.5 ? invalidScalar(doc, q.schema, r) : valid(doc, q.schema, r);
        query.set(q.name, String(typeof value === 'object' ? JSON.stringify(value) : value));
      }
      const headers: Record<string, string> = {};
      for (const h of params.filter((x) => x.in === 'header')) {
        if (!h.required && r.next() < 0.5) continue;
        const schema = resolve(doc, h.schema);
        const fitting = HEADER_VALUES.filter((v) => matches(schema, v));
        const value =
          breakParams && r.next() < 0.5 ? r.pick(HEADER_VALUES) : fitting.length ? r.pick(fitting) : undefined;
        if (value !== undefined) headers[h.name] = value;
      }
      const payload = bodyContent ? body(doc, bodyContent[1].schema, r) : undefined;
      const fullUrl = `${url}${query.size ? `?${query}` : ''}`;
      const answer = app.inject({
        method: method as never,
        url: fullUrl,
        headers: {
          ...headers,
          authorization: `Bearer ${token}`,
          ...(bodyContent ? { 'content-type': bodyContent[0] } : {}),
        },
        ...(payload === undefined ? {} : { payload: JSON.stringify(payload) }),
      });
      // A request with no answer is a finding of its own, not a test that times out without saying
      // which request it was waiting on.
      let timer: NodeJS.Timeout | undefined;
      const res = await Promise.race([
        answer,
        new Promise<undefined>((resolve) => {
          timer = setTimeout(() => resolve(undefined), ANSWER_WITHIN_MS);
        }),
      ]).finally(() => clearTimeout(timer));
      if (res === undefined) {
        findings.push({
          operation: `${method} ${path}`,
          status: 0,
          problem: `no answer within ${ANSWER_WITHIN_MS} ms`,
          request: `${method} ${fullUrl} ${JSON.stringify(headers)} ${JSON.stringify(payload)?.slice(0, 300)}`,
          response: '',
        });
        return { name, operations: operations.length, sent, validated, statuses, findings };
      }
      sent++;
      const key = `${res.statusCode}`;
      statuses[key] = (statuses[key] ?? 0) + 1;
      const operation = `${method} ${path}`;
      const note = (problem: string) =>
        findings.push({
          operation,
          status: res.statusCode,
          problem,
          request: `${method} ${fullUrl.slice(0, 200)} ${JSON.stringify(payload)?.slice(0, 200) ?? ''}`,
          response: res.body.slice(0, 300),
        });
      if (res.statusCode >= 500) note('5xx');
      const allowedByDocument =
        (payload === undefined || depthOf(payload) <= JSON_MAX_DEPTH) &&
        allowed(op, {
          operation: `${method} ${path}`,
          path: pathValues,
          query: Object.fromEntries(query),
          headers,
          body: payload,
          bodyGiven: payload !== undefined,
        });
      // The document and the service agree: what it allows is not refused as malformed (400), and
      // what it forbids is refused.
      const opaque =
        res.statusCode === 400 &&
        (res.json().errors as { path: string; message: string }[] | undefined)?.every(
          (e) => OPAQUE.has(e.path.replace(/^(?:querystring|body)\//, '')) || WORLD_DEPENDENT.test(e.message),
        );
      if (allowedByDocument && res.statusCode === 400 && !opaque)
        note('a request the document allows refused with 400');
      if (!allowedByDocument && res.statusCode < 400)
        note(`a request the document forbids accepted with ${res.statusCode}`);
      if (res.statusCode >= 400) {
        if (!/^application\/problem\+json/.test(String(res.headers['content-type']))) note('error not problem+json');
        else {
          const problem = res.json();
          if (
            typeof problem.type !== 'string' ||
            typeof problem.title !== 'string' ||
            problem.status !== res.statusCode
          )
            note('problem without type, title or matching status');
        }
      } else if (res.statusCode >= 200 && res.statusCode < 300) {
        const documented = op.responses?.[key] ?? op.responses?.['2XX'] ?? op.responses?.default;
        if (!documented) note('undocumented success status');
        const schema = documented?.content?.['application/json']?.schema;
        if (schema && /json/.test(String(res.headers['content-type']))) {
          const validate = ajv.compile(schema);
          validated++;
          if (!validate(res.json())) note(`body not valid: ${ajv.errorsText(validate.errors)}`);
        }
      }
    }
  }
  return { name, operations: operations.length, sent, validated, statuses, findings };
}

/** One finding per operation, status and problem: a fuzz run repeats the same bug many times. */
function distinct(findings: Finding[]): Finding[] {
  const seen = new Map<string, Finding>();
  for (const f of findings) {
    const k = `${f.operation} ${f.status} ${f.problem.slice(0, 80)}`;
    if (!seen.has(k)) seen.set(k, f);
  }
  return [...seen.values()];
}

describe('every endpoint fuzzed from its OpenAPI document', () => {
  let s: Stack;

  beforeAll(async () => {
    // The fuzzer signs in once per operation; the exchange's rate limits have tests of their own.
    s = await dataStack({
      intelligence: true,
      controlEnv: { TOKEN_EXCHANGES_PER_MINUTE_PER_IP: '1000000', TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN: '1000000' },
    });
    await s.identityKnown();
    await s.world(WORLD, {
      objectTypes: {
        Order: {
          displayName: 'Order',
          primaryKey: 'id',
          properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
        },
        Customer: { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string', required: true } } },
      },
      linkTypes: { placedBy: { from: 'Order', to: 'Customer', cardinality: 'MANY_TO_MANY' } },
    });
    // Writes in data, applied by intelligence, so that the consistency tokens the fuzzer sends
    // (data=1, data=2) are met at once instead of each waiting out the bound: without them every
    // such request took the whole bound and the intelligence run overran its timeout.
    let written = 0;
    for (const [type, pk, body] of [
      ['Customer', 'admin', { properties: { id: 'admin' } }],
      ['Order', 'o-1', { properties: { id: 'o-1', amount: 7 } }],
      ['Order', '1', { properties: { id: '1', amount: 3 } }],
    ] as const) {
      const res = await s.dataCall('PUT', `/v1/worlds/${WORLD}/objects/${type}/${pk}`, { body });
      expect(res.statusCode, res.body).toBeLessThan(300);
      written = Math.max(written, Number(/data=(\d+)/.exec(String(res.headers['x-consistency-token']))?.[1] ?? 0));
    }
    expect(written).toBeGreaterThanOrEqual(2);
    await s.until(`intelligence has applied data of ${WORLD} up to write ${written}`, async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${WORLD}/watermarks`, {
        headers: { 'x-consistency-token': `data=${written}` },
      });
      return res.statusCode === 200 ? true : undefined;
    });
  }, 120_000);
  afterAll(async () => {
    await s?.close();
  });

  it.each(['data', 'intelligence', 'control'] as ('data' | 'intelligence' | 'control')[])(
    '%s: no 5xx, every error problem+json, every success valid against its schema',
    async (service) => {
      const app = service === 'control' ? s.control.app : service === 'data' ? s.data.app : s.intelligence?.app;
      if (!app) throw new Error('the stack has no intelligence service');
      const mintToken = async () => {
        const login = await s.control.app.inject({
          method: 'POST',
          url: '/v1/auth/token',
          payload: { apiToken: BOOTSTRAP },
        });
        expect(login.statusCode, login.body).toBe(200);
        return login.json().accessToken as string;
      };
      const run = await fuzz(service, app, mintToken);
      console.log(
        `${service}: ${run.sent} requests over ${run.operations} operations, ${run.validated} success bodies validated, statuses ${JSON.stringify(run.statuses)}`,
      );
      expect(run.sent).toBeGreaterThanOrEqual(REQUESTS_PER_SERVICE);
      expect(run.validated).toBeGreaterThan(100);
      expect(distinct(run.findings)).toEqual([]);
    },
    120_000, // each service about 5 s on a quiet 2-core VM; a request with no answer fails by itself in 20 s
  );
});

import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  Conflict,
  canonicalJson,
  Headers,
  HttpProblem,
  type ObjectType,
  ownValue,
  PayloadTooLarge,
  parseBoundedJson,
  problemResponses,
  recordAudit,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { CAUSED_BY_HEADER, originOf } from '../http/requests.js';
import { NAME } from '../http/schemas.js';
import { ndjsonLines } from '../ndjson.js';
import { checkObject, pointer } from '../objects/model.js';
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { worldContext } from '../worlds/context.js';
import { inWorldTransaction } from '../worlds/locks.js';
import { refuseProtected } from '../worlds/protection.js';
import { type BulkInput, type BulkRow, byNamedPk, writeBulk } from './repository.js';

const BULK = {
  /** Objects in one request; more is a 413. */
  maxObjects: 100_000,
  /** Bytes of one request body (this route only); more is a 413. */
  bodyLimit: 256 * 1024 * 1024,
  /** Line errors reported in one 422; the rest are counted in the last. */
  maxErrors: 1000,
  /** Bytes of one NDJSON line: an object's limit as a PUT body (docs/adr/0008). */
  maxLineBytes: 1024 * 1024,
  /** Bytes of an application/json bulk body, parsed whole: larger writes go as NDJSON, read as a stream. */
  jsonBodyLimit: 32 * 1024 * 1024,
} as const;

const NDJSON = 'application/x-ndjson';

/** A fault of one row of a bulk body: its 1-based line (NDJSON) or array position + 1 (JSON). */
interface LineError {
  line: number;
  path: string;
  message: string;
}

class UnsupportedMediaType extends HttpProblem {
  constructor(detail: string) {
    super(415, 'unsupported-media-type', 'Unsupported Media Type', detail);
  }
}

class LineErrors extends HttpProblem {
  constructor(detail: string, errors: LineError[]) {
    const shown =
      errors.length <= BULK.maxErrors
        ? errors
        : [
            ...errors.slice(0, BULK.maxErrors - 1),
            { line: 0, path: '/', message: `and ${errors.length - BULK.maxErrors + 1} more faults` },
          ];
    super(422, 'unprocessable', 'Unprocessable Content', detail, { errors: shown });
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The number of objects in a body past the limit: a 413. */
const tooMany = () => new PayloadTooLarge(`a bulk write takes at most ${BULK.maxObjects} objects`);

/** The primary key a row names, unchecked, as its pk would be spelled; null when it names none. */
function primaryKeyOf(type: ObjectType, value: unknown): string | null {
  if (!isObject(value) || !isObject(value.properties)) return null;
  // Own only: a row without a key named `constructor` names none, not Object's constructor.
  const given = ownValue(value.properties, type.primaryKey);
  if (given === undefined || given === null) return null;
  return typeof given === 'string' ? given : typeof given === 'number' ? String(given) : String(JSON.stringify(given));
}

/**
 * A check of one row as PUT would check it: records the row's faults, by line, in `errors` and
 * answers the checked row (its pk and canonical properties, all that is kept of it), or null.
 */
function checkRow(type: ObjectType, line: number, value: unknown, errors: LineError[]): BulkInput | null {
  const pkPath = `/properties/${pointer(type.primaryKey)}`;
  if (!isObject(value)) {
    errors.push({ line, path: '', message: 'must be {"properties": {…}}' });
    return null;
  }
  let extra = false;
  for (const k in value) {
    if (k === 'properties' || !Object.hasOwn(value, k)) continue;
    errors.push({ line, path: `/${pointer(k)}`, message: 'is not a known field' });
    extra = true;
  }
  if (!('properties' in value)) {
    errors.push({ line, path: '/properties', message: 'is required' });
    return null;
  }
  const input = value.properties;
  const pk = primaryKeyOf(type, value);
  if (isObject(input) && pk === null) {
    errors.push({ line, path: pkPath, message: 'is required (the primary key)' });
    return null;
  }
  const result = checkObject(type, input, pk ?? '');
  for (const e of result.errors) errors.push({ line, path: e.path, message: e.message });
  if (result.errors.length > 0 || extra || pk === null) return null;
  return { line, pk, json: canonicalJson(result.properties) };
}

/**
 * Refuses a primary key given on an earlier line. Rows must come sorted by pk, in line order among
 * equal ones (writeBulk's order), so that a repeated key is always right after its first line.
 */
function duplicateChecker(type: ObjectType, errors: LineError[]): (row: BulkInput) => BulkRow | null {
  const pkPath = `/properties/${pointer(type.primaryKey)}`;
  let last: BulkInput | undefined;
  return (row) => {
    if (last?.pk === row.pk) {
      errors.push({ line: row.line, path: pkPath, message: `duplicates the primary key of line ${last.line}` });
      return null;
    }
    last = row;
    return row;
  };
}

/**
 * `POST /v1/worlds/{world}/bulk/{type}`: creates or replaces up to 100,000 objects of one type in
 * one transaction (all or nothing). Encapsulated: the NDJSON parser and the raised body limit
 * belong to this route alone.
 */
export default async function bulk(fastify: FastifyInstance) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  // The handler reads NDJSON as a stream (ndjsonLines), after the request is authorised.
  app.addContentTypeParser(NDJSON, (_req, payload, done) => done(null, payload));
  app.post(
    '/v1/worlds/:world/bulk/:type',
    {
      bodyLimit: BULK.jsonBodyLimit, // NDJSON bypasses it: ndjsonLines bounds it by BULK.bodyLimit
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['objects'],
        summary: 'Create or replace many objects of a type, all or nothing',
        description: `Body: ${NDJSON} (one {"properties": {…}} per line; blank lines are skipped) or application/json (an array of them); at most ${BULK.maxObjects} objects (413 beyond). Each row is checked as PUT checks it; any fault refuses the whole request (422, errors [{line, path, message}], nothing written), and so does a primary key given on two lines. A row identical to the stored object changes nothing and emits no event. Answers {created, updated, unchanged, seq} and X-Consistency-Token: data=<seq>.`,
        params: Type.Object({
          world: Type.String({ pattern: WORLD_ID }),
          type: Type.String({ pattern: NAME, description: 'the object type (apiName)' }),
        }),
        headers: Type.Object({
          'x-consistency-token': Headers.consistencyToken(),
          'x-caused-by': Headers.causedBy(CAUSED_BY_HEADER),
        }),
        // Parsed by the route itself (NDJSON is not JSON): documented, not validated, here.
        'x-document-body': {
          content: {
            [NDJSON]: { schema: { type: 'string', description: 'one {"properties": {…}} per line' } },
            'application/json': {
              schema: Type.Array(
                Type.Object(
                  { properties: Type.Record(Type.String({ minLength: 1 }), Type.Unknown()) },
                  { additionalProperties: false },
                ),
              ),
            },
          },
        },
        response: {
          200: Type.Object({
            created: Type.Integer(),
            updated: Type.Integer(),
            unchanged: Type.Integer(),
            seq: Type.Integer({ description: 'the highest data seq of the objects written or left as they were' }),
          }),
          // Its errors keep their `line`: the schema names it.
          422: Type.Object(
            {
              type: Type.String(),
              title: Type.String(),
              status: Type.Integer(),
              detail: Type.Optional(Type.String()),
              instance: Type.Optional(Type.String()),
              errors: Type.Array(
                Type.Object({ line: Type.Optional(Type.Integer()), path: Type.String(), message: Type.String() }),
              ),
            },
            { additionalProperties: true },
          ),
          ...problemResponses(400, 401, 403, 404, 409, 413, 415, 503),
        },
      },
    },
    async (request, reply) => {
      const { world, type: typeName } = request.params;
      const contentType = String(request.headers['content-type'] ?? '')
        .split(';')[0]
        ?.trim()
        .toLowerCase();
      if (contentType !== NDJSON && contentType !== 'application/json') {
        throw new UnsupportedMediaType(`a bulk body is ${NDJSON} or application/json, not ${contentType || 'absent'}`);
      }
      const origin = originOf(request);
      await app.awaitSchemaConsistency(request, world);
      // The type the rows are checked against as they arrive; the write checks it still applies.
      const read = await worldContext(app.pg, world);
      if (!read.provisioned) throw notProvisioned(world);
      // Before the body is read; checked again in the write's transaction, which decides.
      refuseProtected(world, read.protection);
      const { type } = await objectTypeOf(app, app.pg, world, typeName, read.schemaVersion);
      // Only checked rows are kept (pk and canonical JSON), never the body or its parsed values.
      const rows: BulkInput[] = [];
      const errors: LineError[] = [];
      let total = 0;
      const take = (line: number, value: unknown) => {
        if (++total > BULK.maxObjects) throw tooMany();
        const row = checkRow(type, line, value, errors);
        if (row) rows.push(row);
      };
      if (contentType === NDJSON) {
        let line = 0;
        const limits = { maxBytes: BULK.bodyLimit, maxLineBytes: BULK.maxLineBytes };
        for await (const chunk of ndjsonLines(request.body as AsyncIterable<Buffer>, limits)) {
          for (const raw of chunk) {
            line++;
            const text = raw.trim();
            if (text === '') continue;
            let value: unknown;
            try {
              value = parseBoundedJson(text);
            } catch (e) {
              if (++total > BULK.maxObjects) throw tooMany();
              errors.push({ line, path: '', message: `is not JSON: ${(e as Error).message}` });
              continue;
            }
            take(line, value);
          }
        }
      } else {
        const body: unknown = request.body;
        if (!Array.isArray(body)) {
          throw new LineErrors('a JSON bulk body must be an array of {"properties": {…}}', [
            { line: 0, path: '', message: 'must be an array' },
          ]);
        }
        if (body.length > BULK.maxObjects) throw tooMany();
        for (const [i, value] of body.entries()) take(i + 1, value);
      }
      const refuse = (faults: LineError[]) => {
        faults.sort((a, b) => a.line - b.line);
        return new LineErrors(
          `${new Set(faults.map((f) => f.line)).size} of ${total} rows do not match the schema of ${world}; nothing was written`,
          faults,
        );
      };
      if (errors.length > 0) {
        // Nothing will be written: the rest only checked for duplicates, for the report.
        const check = duplicateChecker(type, errors);
        for (const row of rows.sort(byNamedPk)) check(row);
        throw refuse(errors);
      }
      const result = await inWorldTransaction(app.pg, world, async (tx) => {
        const ctx = await worldContext(tx, world);
        if (!ctx.provisioned) throw notProvisioned(world);
        refuseProtected(world, ctx.protection);
        if (ctx.schemaVersion !== read.schemaVersion) {
          throw new Conflict(
            `the schema of ${world} changed (version ${read.schemaVersion} to ${ctx.schemaVersion}) while the body was read; send it again`,
          );
        }
        const faults: LineError[] = [];
        const w = {
          worldId: world,
          type: typeName,
          schemaVersion: ctx.schemaVersion,
          forked: ctx.forked ?? false,
          origin,
          topicPrefix: app.topicPrefix,
        };
        const written = await writeBulk(tx, w, rows, duplicateChecker(type, faults));
        if (written === null || faults.length > 0) throw refuse(faults);
        await recordAudit(tx, request, {
          action: 'object.bulk',
          result: written.created + written.updated === 0 ? 'unchanged' : written.created > 0 ? 'created' : 'updated',
          worldId: world,
          subject: typeName,
          detail: { created: written.created, updated: written.updated, unchanged: written.unchanged },
        });
        return written;
      });
      if (result.seq > 0) reply.header('x-consistency-token', `data=${result.seq}`);
      return result;
    },
  );
}

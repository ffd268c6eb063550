import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  decodeCursor,
  documentedJsonBody,
  encodeCursor,
  type FieldError,
  Headers,
  HttpProblem,
  INSTANT,
  NotFound,
  normaliseInstant,
  type ObjectType,
  PayloadTooLarge,
  parseBoundedJson,
  problemResponses,
  type Queryable,
  recordAudit,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { CAUSED_BY_HEADER, keyParam, originOf, Pk } from '../http/requests.js';
import { At, NAME } from '../http/schemas.js';
import { ndjsonLines } from '../ndjson.js';
import { LIMITS } from '../objects/model.js';
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { worldContext } from '../worlds/context.js';
import { inWorldTransaction } from '../worlds/locks.js';
import { refuseProtected } from '../worlds/protection.js';
import { resolveRef } from '../worlds/refs.js';
import {
  AGGREGATES,
  type Aggregate,
  aggregatesFor,
  aggregateValue,
  BUCKET,
  bucketMs,
  checkPoint,
  pointValue,
  SERIES_LIMITS,
  type SeriesDef,
  seriesOf,
} from './model.js';
import { readPoints, readRollup, type SeriesSource, seriesIdOf } from './repository.js';
import { SeriesBatch, writeSeriesBatch } from './write.js';

const NDJSON = 'application/x-ndjson';
const errors = problemResponses(400, 401, 403, 404, 409, 413, 422, 503);
/** Reads at a ref: also 410 before the retained horizon (docs/adr/0072). */
const readErrors = problemResponses(400, 401, 403, 404, 409, 410, 413, 422, 503);

const SeriesParams = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  type: Type.String({ pattern: NAME, description: 'the object type (apiName)' }),
  pk: Pk(),
  series: Type.String({ pattern: NAME, description: 'the time-series property' }),
});
const Point = Type.Object({ time: Type.String(), value: Type.Unknown() });
const Written = Type.Object({
  written: Type.Integer({ description: 'points added or changed' }),
  unchanged: Type.Integer({ description: 'points already stored with the same value (a repeat is a no-op)' }),
  seq: Type.Integer({ description: "the batch's data seq (0 when nothing was written)" }),
});
const WriteHeaders = Type.Object({
  'x-consistency-token': Headers.consistencyToken(),
  'x-caused-by': Headers.causedBy(CAUSED_BY_HEADER),
});

/** The series a path names, or a 404 naming it. */
function seriesNamed(type: ObjectType, name: string, world: string): SeriesDef {
  const series = seriesOf(type, name);
  if (!series) {
    throw new NotFound(`${type.apiName}.${name} is not a time-series property in the schema of ${world}`);
  }
  return series;
}

/** Points past their series' retention would be dropped unseen: refused instead. */
function pastRetention(series: SeriesDef, time: string, now: number): string | undefined {
  if (series.retentionMs === undefined || Date.parse(time) >= now - series.retentionMs) return undefined;
  return `is older than the retention of ${series.name}`;
}

/** A query instant (`from`, `to`) as stored, or a 400 naming it. */
function instantParam(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const r = normaliseInstant(value);
  if ('error' in r) throw new BadRequest(`${name} ${r.error}`, [{ path: `querystring/${name}`, message: r.error }]);
  return r.value;
}

/** A bulk line's fault: its 1-based line, the field's JSON path in it, and the rule. */
interface LineFault {
  line: number;
  path: string;
  message: string;
}

class LineFaults extends HttpProblem {
  constructor(detail: string, faults: LineFault[], stored: number) {
    super(422, 'unprocessable', 'Unprocessable Content', detail, { errors: faults, stored });
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Time series of objects (docs/adr/0028): points written to one series, many series at once as
 * a stream, ranges of points and rollups over fixed buckets read back.
 */
export default async function seriesRoutes(fastify: FastifyInstance) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  // The bulk body is read as a stream, one batch at a time: not buffered by a parser.
  app.addContentTypeParser(NDJSON, (_request, payload, done) => done(null, payload));

  app.post(
    '/v1/worlds/:world/series/:type/:pk/:series',
    {
      bodyLimit: 8 * 1024 * 1024,
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['series'],
        summary: 'Write points of one time series of an object',
        description: `Body {"points": [{"time": "<RFC 3339>", "value": …}]}, at most ${SERIES_LIMITS.pointsPerRequest} points (413 beyond). Values are of the series' type. All or nothing: any fault is a 422 naming the point (/points/3/value) and nothing is stored. A point at a known instant with the same value changes nothing; with another value it replaces the stored one (last write wins, also within one body). The changed points are announced as series.points.written on onto.series.points.`,
        params: SeriesParams,
        headers: WriteHeaders,
        // Points are checked by the route, so that a fault names the point (/points/3/time) as a 422.
        body: Type.Object({ points: Type.Array(Type.Unknown()) }, { additionalProperties: false }),
        ...documentedJsonBody(
          Type.Object(
            {
              points: Type.Array(
                Type.Object(
                  {
                    time: Type.String({ format: 'date-time', description: 'RFC 3339 with an offset' }),
                    value: Type.Unknown({ description: "of the series' type: a number, a boolean or an enum value" }),
                  },
                  { additionalProperties: false },
                ),
                { maxItems: SERIES_LIMITS.pointsPerRequest },
              ),
            },
            { additionalProperties: false },
          ),
        ),
        response: { 200: Written, ...errors },
      },
      // The body's array length is checked before its points: a 413, not a 422 per point.
      preValidation: async (request) => {
        const points = (request.body as { points?: unknown } | undefined)?.points;
        if (Array.isArray(points) && points.length > SERIES_LIMITS.pointsPerRequest) {
          throw new PayloadTooLarge(`a request takes at most ${SERIES_LIMITS.pointsPerRequest} points (/points)`);
        }
      },
    },
    async (request, reply) => {
      const { world, type: typeName, pk, series: seriesName } = request.params;
      keyParam('pk', pk);
      const origin = originOf(request);
      await app.awaitSchemaConsistency(request, world);
      const ctx = await worldContext(app.pg, world);
      if (!ctx.provisioned) throw notProvisioned(world);
      refuseProtected(world, ctx.protection);
      const { type } = await objectTypeOf(app, app.pg, world, typeName, ctx.schemaVersion);
      const series = seriesNamed(type, seriesName, world);
      const faults: FieldError[] = [];
      const batch = new SeriesBatch((i) => `/points/${i}`);
      const now = Date.now();
      request.body.points.forEach((raw, i) => {
        const path = `/points/${i}`;
        const point = checkPoint(series, raw, path, faults);
        const old = point && pastRetention(series, point.time, now);
        if (old) faults.push({ path: `${path}/time`, message: old });
        else if (point) batch.add(typeName, pk, series, point.time, point.num, point.label, i);
      });
      if (faults.length > 0) {
        throw new Unprocessable(
          `${faults.length} faults in the points of ${typeName}.${seriesName}; nothing was stored`,
          faults.slice(0, SERIES_LIMITS.errors),
        );
      }
      const w = { worldId: world, schemaVersion: ctx.schemaVersion, origin };
      const result = await writeSeriesBatch(app, w, batch, (tx, r) =>
        recordAudit(tx, request, {
          action: 'series.write',
          result: r.written > 0 ? 'updated' : 'unchanged',
          worldId: world,
          subject: `${typeName}/${pk}/${seriesName}`,
          detail: { written: r.written, unchanged: r.unchanged },
        }),
      );
      if (result.seq > 0) reply.header('x-consistency-token', `data=${result.seq}`);
      return result;
    },
  );

  app.post(
    '/v1/worlds/:world/series',
    {
      bodyLimit: SERIES_LIMITS.bulkBodyBytes, // documents it: the stream is bounded by ndjsonLines
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['series'],
        summary: 'Write points of many series of many objects, streamed',
        description: `Body ${NDJSON}: one point per line, {"type", "pk", "series", "time", "value"}; blank lines are skipped. Read and written ${SERIES_LIMITS.bulkBatch} lines at a time, each batch in its own transaction: a fault refuses its batch (nothing of it is stored) and ends the request with a 422 naming the line and field, and saying how many lines before it were stored. Repeating a body is harmless: a repeated point is a no-op.`,
        params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
        headers: WriteHeaders,
        'x-document-body': {
          content: { [NDJSON]: { schema: { type: 'string', description: 'one point per line' } } },
        },
        response: {
          200: Type.Object({
            lines: Type.Integer({ description: 'points read' }),
            written: Type.Integer(),
            unchanged: Type.Integer(),
            seq: Type.Integer({ description: 'the data seq of the last batch' }),
          }),
          422: Type.Object(
            {
              type: Type.String(),
              title: Type.String(),
              status: Type.Integer(),
              detail: Type.Optional(Type.String()),
              stored: Type.Integer({ description: 'lines stored before the refused batch' }),
              errors: Type.Array(Type.Object({ line: Type.Integer(), path: Type.String(), message: Type.String() })),
            },
            { additionalProperties: true },
          ),
          ...problemResponses(400, 401, 403, 404, 409, 415, 503),
        },
      },
    },
    async (request, reply) => {
      const { world } = request.params;
      const contentType = String(request.headers['content-type'] ?? '')
        .split(';')[0]
        ?.trim()
        .toLowerCase();
      if (contentType !== NDJSON) {
        throw new HttpProblem(415, 'unsupported-media-type', 'Unsupported Media Type', `the body is ${NDJSON}`);
      }
      const origin = originOf(request);
      await app.awaitSchemaConsistency(request, world);
      const ctx = await worldContext(app.pg, world);
      if (!ctx.provisioned) throw notProvisioned(world);
      refuseProtected(world, ctx.protection);
      const doc = await app.schemaReplica.document(app.pg, world, ctx.schemaVersion);
      const w = { worldId: world, schemaVersion: ctx.schemaVersion, origin };
      const now = Date.now();
      const totals = { lines: 0, written: 0, unchanged: 0, seq: 0 };
      let stored = 0;
      const newBatch = () => new SeriesBatch((line) => `/${line}`);
      let batch = newBatch();
      const faults: LineFault[] = [];
      let writing: Promise<void> = Promise.resolve();
      let failure: unknown;
      // The request's one audit record (docs/adr/0084), in the transaction of its last batch, or
      // of its own when that batch wrote nothing or was refused after others were stored.
      let audited = false;
      const audit = (tx: Queryable, last: { written: number; unchanged: number }) => {
        audited = true;
        const written = totals.written + last.written;
        return recordAudit(tx, request, {
          action: 'series.bulk',
          result: written > 0 ? 'updated' : 'unchanged',
          worldId: world,
          detail: { lines: totals.lines, written, unchanged: totals.unchanged + last.unchanged },
        });
      };
      // One batch is written while the next is read and checked: PostgreSQL's work and Node's
      // overlap, and at most two batches are held.
      const flush = async (final = false) => {
        await writing;
        const [mine, upTo] = [batch, totals.lines];
        batch = newBatch();
        if (faults.length > 0 || failure !== undefined || mine.size === 0) return;
        writing = writeSeriesBatch(app, w, mine, final ? audit : undefined).then(
          (r) => {
            totals.written += r.written;
            totals.unchanged += r.unchanged;
            totals.seq = r.seq;
            stored = upTo;
          },
          (error) => {
            // A fault found while writing (a point on too many new days) names its line.
            if (error instanceof Unprocessable && error.extensions.errors) {
              for (const e of error.extensions.errors) {
                const line = Number(e.path.split('/')[1]);
                faults.push({ line, path: e.path.replace(/^\/\d+/, ''), message: e.message });
              }
            } else failure = error;
          },
        );
      };
      const lines = ndjsonLines(request.body as AsyncIterable<Buffer>, {
        maxBytes: SERIES_LIMITS.bulkBodyBytes,
        maxLineBytes: SERIES_LIMITS.bulkLineBytes,
      });
      let n = 0;
      reading: for await (const chunk of lines)
        for (const raw of chunk) {
          n++;
          const text = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
          if (text.trim() === '') continue;
          totals.lines++;
          const fault = (path: string, message: string) => {
            if (faults.length < SERIES_LIMITS.errors) faults.push({ line: n, path, message });
          };
          let value: unknown;
          try {
            value = parseBoundedJson(text);
          } catch (e) {
            fault('', `is not JSON: ${(e as Error).message}`);
            continue;
          }
          if (!isObject(value)) {
            fault('', 'must be {"type", "pk", "series", "time", "value"}');
            continue;
          }
          const { type: typeName, pk, series: seriesName, ...point } = value;
          const type =
            typeof typeName === 'string' && Object.hasOwn(doc.objectTypes, typeName)
              ? doc.objectTypes[typeName]
              : undefined;
          if (!type) {
            fault('/type', `object type ${JSON.stringify(typeName)} is not in the schema of ${world}`);
            continue;
          }
          if (typeof pk !== 'string' || pk.length === 0 || pk.length > LIMITS.pkLength) {
            fault('/pk', `must be a primary key: a string of 1 to ${LIMITS.pkLength} characters`);
            continue;
          }
          const series = typeof seriesName === 'string' ? seriesOf(type, seriesName) : undefined;
          if (!series) {
            fault('/series', `${JSON.stringify(seriesName)} is not a time-series property of ${type.apiName}`);
            continue;
          }
          const pointFaults: FieldError[] = [];
          const checked = checkPoint(series, point, '', pointFaults);
          for (const f of pointFaults) fault(f.path, f.message);
          const old = checked && pastRetention(series, checked.time, now);
          if (old) fault('/time', old);
          if (!checked || old) continue;
          batch.add(typeName as string, pk, series, checked.time, checked.num, checked.label, n);
          if (batch.size >= SERIES_LIMITS.bulkBatch) await flush();
          if (faults.length > 0 || failure !== undefined) break reading;
        }
      await flush(true);
      await writing;
      if (!audited && failure === undefined && (faults.length === 0 || stored > 0)) {
        await inWorldTransaction(app.pg, world, (tx) => audit(tx, { written: 0, unchanged: 0 }));
      }
      if (failure !== undefined) throw failure;
      if (faults.length > 0) {
        throw new LineFaults(
          `line ${faults[0]?.line} is refused; its batch was not stored (${stored} lines before it were)`,
          faults,
          stored,
        );
      }
      if (totals.seq > 0) reply.header('x-consistency-token', `data=${totals.seq}`);
      return totals;
    },
  );

  app.get(
    '/v1/worlds/:world/series/:type/:pk/:series',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['series'],
        summary: 'Read points of a time series, or rollups over fixed buckets',
        description:
          "Points with from <= time < to, by time, a page at a time (next is the cursor of the following page, null at the end). With bucket (30s, 1m, 1h, 1d, 1w…, aligned on the Unix epoch) and agg (min, max, avg, sum, count, last) each point is a bucket: its start and its aggregate, computed in PostgreSQL. Points past the series retention are not answered. With at (a commit, an instant or a tag of the world), the series as it was then; in a fork, the base's points up to the fork point and the fork's own after (the fork's win an instant both have).",
        params: SeriesParams,
        querystring: Type.Object({
          from: Type.Optional(Type.String({ pattern: INSTANT.source, description: 'RFC 3339, inclusive' })),
          to: Type.Optional(Type.String({ pattern: INSTANT.source, description: 'RFC 3339, exclusive' })),
          bucket: Type.Optional(
            Type.String({ pattern: BUCKET.source, description: 'a bucket width: 30s, 1m, 1h, 1d, 1w…; with agg' }),
          ),
          agg: Type.Optional(
            Type.String({
              enum: [...AGGREGATES],
              description: 'with bucket; an enum series answers count and last only',
            }),
          ),
          limit: Type.Integer({ minimum: 1, maximum: SERIES_LIMITS.pageMax, default: SERIES_LIMITS.pageDefault }),
          cursor: Type.Optional(Type.String()),
          at: At,
        }),
        headers: Type.Object({ 'x-consistency-token': Headers.consistencyToken() }),
        response: {
          200: Type.Object({ points: Type.Array(Point), next: Type.Union([Type.String(), Type.Null()]) }),
          ...readErrors,
        },
      },
    },
    async (request) => {
      const { world, type: typeName, pk, series: seriesName } = request.params;
      keyParam('pk', pk);
      const q = request.query;
      const from = instantParam('from', q.from);
      const to = instantParam('to', q.to);
      let bucket: number | undefined;
      let agg: Aggregate | undefined;
      if (q.bucket !== undefined || q.agg !== undefined) {
        bucket = q.bucket === undefined ? undefined : bucketMs(q.bucket);
        if (q.bucket === undefined || bucket === undefined) {
          throw new BadRequest('a rollup needs a bucket width', [
            {
              path: 'querystring/bucket',
              message: 'must be a duration: a whole number of s, m, h, d or w, such as 1h',
            },
          ]);
        }
        if (q.agg === undefined || !(AGGREGATES as readonly string[]).includes(q.agg)) {
          throw new BadRequest('a rollup needs an aggregate', [
            { path: 'querystring/agg', message: `must be one of ${AGGREGATES.join(', ')}` },
          ]);
        }
        agg = q.agg as Aggregate;
      }
      const position = decodeCursor(q.cursor, (v) => {
        if (typeof v.after !== 'string' || v.bucket !== (q.bucket ?? null) || v.agg !== (q.agg ?? null))
          return undefined;
        if ((v.at ?? null) !== (q.at ?? null) || (v.commit !== undefined && typeof v.commit !== 'number'))
          return undefined;
        const r = normaliseInstant(v.after);
        return 'value' in r ? { after: r.value, commit: v.commit as number | undefined } : undefined;
      });
      const after = position?.after ?? null;
      await app.awaitSchemaConsistency(request, world);
      // An unforked world read now reads its own series_points as before; a fork or a ref reads up the chain.
      let schemaVersion: number;
      let chain: { commit: number | null } | undefined;
      if (q.at === undefined) {
        const ctx = await worldContext(app.pg, world);
        if (!ctx.provisioned) throw notProvisioned(world);
        schemaVersion = ctx.schemaVersion;
        if (ctx.forked) chain = { commit: null };
      } else {
        // Page 2 reads the commit page 1 resolved, even when `at` was an instant.
        const point =
          position?.commit !== undefined
            ? await resolveRef(app.pg, world, String(position.commit), 'querystring/cursor')
            : await resolveRef(app.pg, world, q.at);
        schemaVersion = point.schemaVersion;
        chain = { commit: point.commit };
      }
      const { type } = await objectTypeOf(app, app.pg, world, typeName, schemaVersion);
      const series = seriesNamed(type, seriesName, world);
      if (agg && !aggregatesFor(series).includes(agg)) {
        throw new BadRequest(`${typeName}.${seriesName} holds labels: it answers ${aggregatesFor(series).join(', ')}`, [
          { path: 'querystring/agg', message: `must be one of ${aggregatesFor(series).join(', ')} for an enum series` },
        ]);
      }
      let source: SeriesSource;
      if (chain === undefined) {
        const seriesId = await seriesIdOf(app.pg, world, typeName, pk, seriesName);
        if (seriesId === undefined) return { points: [], next: null };
        source = { worldId: world, seriesId };
      } else source = { world, commit: chain.commit, type: typeName, pk, series: seriesName };
      const kept =
        series.retentionMs === undefined ? undefined : new Date(Date.now() - series.retentionMs).toISOString();
      const range = {
        from: kept !== undefined && (from === undefined || from < kept) ? kept : (from ?? '-infinity'),
        to: to ?? 'infinity',
        after,
        limit: q.limit + 1,
      };
      const rows =
        agg && bucket
          ? await readRollup(app.pg, source, { ...range, bucketMs: bucket, agg })
          : await readPoints(app.pg, source, range);
      const page = rows.slice(0, q.limit);
      const last = page[page.length - 1];
      const next =
        rows.length > q.limit && last
          ? encodeCursor({
              after: last.time,
              bucket: q.bucket ?? null,
              agg: q.agg ?? null,
              ...(q.at !== undefined && { at: q.at, commit: chain?.commit ?? undefined }),
            })
          : null;
      return {
        points: page.map((p) => ({
          time: p.time,
          value: agg ? aggregateValue(series, agg, p.num, p.label) : pointValue(series, p.num, p.label),
        })),
        next,
      };
    },
  );
}

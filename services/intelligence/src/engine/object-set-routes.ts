/**
 * Object sets over the read model (docs/adr/0075): `POST /v1/worlds/{world}/objects/{type}/query`
 * and `…/aggregate`, data's endpoints (docs/adr/0047) over intelligence's read model, where
 * `derived.<name>` fields filter, sort, group and measure derived values. Pages of a query read one
 * data commit; tokens are signed and bound to their query and world.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  BODY_LIMITS,
  indexedAccess,
  type ObjectType,
  objectSetSchemas,
  ownValue,
  PageTokens,
  parseGroupBy,
  parseMetrics,
  parseOrderBy,
  parseSelect,
  parseWhere,
  pinCommit,
  pivot,
  type Queryable,
  QueryFaults,
  type SchemaDocument,
  setOwn,
  Unprocessable,
  WORLD_ID,
  withExamples,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { listDerived } from '../derived/repository.js';
import { NAME, notProvisioned, provisioned, ReadHeaders, readErrors } from '../http.js';
import {
  aggregate,
  chainAt,
  DERIVED,
  queryPage,
  querySchema,
  readsDerived,
  type Segment,
  scanSize,
} from '../readmodel/sets.js';
import { aggregateAnswerExamples, aggregateExamples, queryAnswerExamples, queryExamples } from './examples.js';

/** A field: a property, or `derived.<name>` for a derived property. */
const FIELD = '(?:derived\\.)?[A-Za-z][A-Za-z0-9_]{0,62}';
const { QueryBody, AggregateBody, AggregateAnswer } = objectSetSchemas(FIELD, {
  // As ?at= of the read model's reads: a commit, something shaped like an instant (422), or a tag name.
  pattern: '^(?:[0-9]{1,15}|[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ].*|(?![0-9]+$)[a-zA-Z0-9][a-zA-Z0-9._-]{0,99})$',
  description:
    "read at a ref, as ?at= of the read model's reads: a data commit or a tag of the world; absent: the world's applied data, pinned by the first page",
});

const Params = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  type: Type.String({ pattern: NAME, description: 'the object type (apiName)' }),
});
const QueryAnswer = Type.Object({
  objects: Type.Array(
    Type.Object({
      type: Type.String(),
      pk: Type.String(),
      version: Type.Integer(),
      properties: Type.Record(Type.String(), Type.Unknown()),
      derived: Type.Record(Type.String(), Type.Unknown(), {
        description: 'the derived values of the object at the commit (a failed evaluation: absent)',
      }),
    }),
  ),
  nextPageToken: Type.Union([Type.String(), Type.Null()]),
  commit: Type.Integer({ description: 'the data commit every page of the query reads' }),
});

export interface ReadModelQueryOptions {
  /** Objects a query may read without an index narrowing it (QUERY_SCAN_LIMIT). */
  scanLimit: number;
  /** QUERY_TOKEN_SECRET; absent: a random one per process. */
  tokenSecret?: string | undefined;
}

const AT_RULES =
  "`at` as `?at=` of the read model: a data commit or a tag of the world (a tag not positioned yet waits, bounded, then 409; no such tag 404; an instant 422; a commit before a fork's fork point 422); absent: the data commit intelligence has applied for the world, pinned by the first page.";

export default fp(
  async (fastify: FastifyInstance, opts: ReadModelQueryOptions) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const tokens = new PageTokens(opts.tokenSecret ? Buffer.from(opts.tokenSecret, 'utf8') : randomBytes(32));

    /**
     * The commit a set is read at and its chain: `at` resolved as the read model's other reads do,
     * or the world's applied data (its watermark; in a fork, never before the fork point).
     */
    async function pinned(request: FastifyRequest, world: string, at: string | undefined, commit: number | null) {
      const watermark = await app.awaitConsistency(request, world);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const base = await app.awaitBase(world);
      let c: number;
      if (commit !== null) c = commit;
      else if (at !== undefined) {
        const point = await app.resolveAt(world, at, 'body/at');
        if (base.kind === 'known' && point.commit < base.seq) {
          throw new Unprocessable(
            `${world} was forked from ${base.world} at commit ${base.seq}: it has no commit ${point.commit}`,
            [{ path: 'body/at', message: `must be at or after the fork point, ${base.seq}` }],
          );
        }
        await app.awaitDataApplied(world, point.needs);
        c = point.commit;
      } else c = Math.max(watermark, base.kind === 'known' ? base.seq : 0);
      return { commit: c, watermark, chain: await chainAt(app.pg, world, c) };
    }

    /** The schema with the world's derived fields, and the object type asked. */
    async function schemaOf(db: Queryable, world: string, typeName: string, chain: Segment[]) {
      const [{ document }, definitions] = await Promise.all([
        app.schemaReplica.current(db, world),
        listDerived(db, world),
      ]);
      const doc: SchemaDocument = await querySchema(db, document, definitions, chain);
      const type = Object.hasOwn(doc.objectTypes, typeName) ? doc.objectTypes[typeName] : undefined;
      if (!type) {
        throw new Unprocessable(`${typeName} is not an object type of ${world}'s schema`, [
          { path: 'params/type', message: `is not an object type of the schema` },
        ]);
      }
      return { doc, type };
    }

    /** 422 when a where-clause no index narrows reads more than the scan limit (docs/adr/0048). */
    async function checkScan(
      db: Queryable,
      chain: Segment[],
      typeName: string,
      where: ReturnType<typeof parseWhere>,
      sortFirst: { property: string; indexed: boolean } | undefined,
      allowScan: boolean | undefined,
    ) {
      if (allowScan) return;
      let culprit: { property: string; path: string } | undefined;
      if (where !== null) {
        const access = indexedAccess(where);
        if (!access.indexed) culprit = access;
      } else if (sortFirst && !sortFirst.indexed) {
        culprit = { property: sortFirst.property, path: 'body/orderBy/0/property' };
      }
      if (!culprit) return;
      const size = await scanSize(db, chain, typeName, opts.scanLimit);
      if (size <= opts.scanLimit) return;
      const what = `the read model indexes the primary key only: narrow the where-clause by ${typeName}'s primary key or set allowScan`;
      throw new Unprocessable(`the query reads more than ${opts.scanLimit} ${typeName} objects without an index`, [
        {
          path: culprit.path || 'body/where',
          message: `is not served by an index and the set has more than ${opts.scanLimit} objects: ${what}`,
        },
      ]);
    }

    const faultsOr = (faults: QueryFaults, detail: string) => {
      if (faults.any) throw new BadRequest(detail, faults.list);
    };

    app.post(
      '/v1/worlds/:world/objects/:type/query',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['read model'],
          summary: 'Query an object set of the read model, derived values included',
          description: `data's object-set query over intelligence's read model: the where-clause, orderBy, select and pivotTo take the object's properties and its derived properties as \`derived.<name>\` fields (typed by the CEL kind of their values: numbers, strings, booleans; other kinds and derived properties without a value yet take $isNull only). The live objects of the type matching \`where\`, each with its derived values, in \`orderBy\` order (then the primary key, as text). Every page reads the data commit the first page pinned (\`commit\`). ${AT_RULES} X-Consistency-Token: data=<n> waits, bounded, until intelligence has applied the world's data up to n. Unknown fields, operators, link types, values of the wrong type, a where-clause deeper than 16 or with more than 200 conditions: 400 naming the JSON path. The read model indexes the primary key only: more than QUERY_SCAN_LIMIT objects to read with no condition on it, 422 naming the field, unless allowScan. A page token altered or reused for another query: 400.`,
          params: Params,
          headers: ReadHeaders,
          body: withExamples(QueryBody, queryExamples),
          response: { 200: withExamples(QueryAnswer, queryAnswerExamples), ...readErrors },
        },
      },
      async (request, reply) => {
        const { world, type: typeName } = request.params;
        const body = request.body;
        const { pageSize: size, pageToken, ...rest } = body;
        const pageSize = size ?? 100;
        const q = createHash('sha256')
          .update(JSON.stringify(['intelligence-query', world, typeName, rest]))
          .digest('base64url')
          .slice(0, 22);
        const position = pageToken === undefined ? null : tokens.open(pageToken, q);
        const { commit, chain, watermark } = await pinned(request, world, body.at, position?.c ?? null);
        const { doc, type } = await schemaOf(app.pg, world, typeName, chain);
        const faults = new QueryFaults();
        const where = parseWhere(doc, type, body.where, 'body/where', faults);
        let target: ObjectType = type;
        let condition = where;
        if (body.pivotTo !== undefined && !faults.any) {
          const pivoted = pivot(doc, type, where, body.pivotTo, faults);
          if (pivoted) {
            target = pivoted.type;
            condition = pivoted.where;
          }
        }
        const keys = parseOrderBy(target, body.orderBy, faults);
        const select = parseSelect(target, body.select, faults);
        faultsOr(faults, 'the query cannot be made as asked');
        if (!position) await checkScan(app.pg, chain, typeName, condition, keys[0], body.allowScan);
        const rows = await queryPage(
          app.pg,
          { world, commit, chain, derived: true },
          { type: target.apiName, where: condition, keys, after: position?.k ?? null, limit: pageSize + 1 },
        );
        const page = rows.slice(0, pageSize);
        const last = page.at(-1);
        const more = rows.length > pageSize && last !== undefined;
        // A live page token keeps its commit from being pruned (docs/adr/0077).
        if (more) await pinCommit(app.pg, world, commit, tokens.ttlMs);
        await app.consistencyHeader(reply, world, watermark);
        return {
          objects: page.map((r) => ({
            type: target.apiName,
            pk: r.pk,
            version: r.version,
            properties: select ? pick(r.properties, select) : r.properties,
            derived: select ? pick(r.derived, select, DERIVED) : r.derived,
          })),
          nextPageToken: more ? tokens.sign({ q, c: commit, k: last.keys, t: Date.now() }) : null,
          commit,
        };
      },
    );

    app.post(
      '/v1/worlds/:world/objects/:type/aggregate',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['read model'],
          summary: 'Aggregate an object set of the read model, derived values included',
          description: `data's aggregation over intelligence's read model: \`where\`, \`groupBy\` and \`metrics\` take properties and \`derived.<name>\` fields. Metrics of the live objects matching \`where\`, grouped by up to 3 fields: exact values (\`maxGroups\` distinct values at most, else 422), numeric ranges (from inclusive, to exclusive) or time buckets of timestamps and dates (UTC). Exact, approximateDistinct included, through a fork's chain. ${AT_RULES} X-Consistency-Token: data=<n> waits, bounded, until applied. More than QUERY_SCAN_LIMIT objects with no condition on the primary key: 422 unless allowScan.`,
          params: Params,
          headers: ReadHeaders,
          body: withExamples(AggregateBody, aggregateExamples),
          response: { 200: withExamples(AggregateAnswer, aggregateAnswerExamples), ...readErrors },
        },
      },
      async (request, reply) => {
        const { world, type: typeName } = request.params;
        const body = request.body;
        const pin = await pinned(request, world, body.at, null);
        const { commit, chain } = pin;
        // It pins nothing (a query's pages do, on the primary): a replica that has replayed the
        // primary's position now, where the commit was cut, reads it (docs/adr/0080).
        const { db, watermark } = await app.readModelDb(request, world, pin.watermark, { primaryNow: true });
        const { doc, type } = await schemaOf(db, world, typeName, chain);
        const faults = new QueryFaults();
        const where = parseWhere(doc, type, body.where, 'body/where', faults);
        const groupBy = parseGroupBy(type, body.groupBy, faults);
        const metrics = parseMetrics(type, body.metrics, faults);
        faultsOr(faults, 'the aggregation cannot be made as asked');
        await checkScan(db, chain, typeName, where, undefined, body.allowScan);
        const cap = groupBy.reduce((n, g) => Math.min(n * (g.type === 'exact' ? g.maxGroups : 1_000), 1_000_000), 1);
        // Derived values cost a lookup per object: read only when the aggregation uses one.
        const derived =
          readsDerived(where) ||
          groupBy.some((g) => g.property.startsWith(DERIVED)) ||
          metrics.some((m) => m.property?.startsWith(DERIVED) === true);
        const groups = await aggregate(
          db,
          { world, commit, chain, derived },
          { type: typeName, where, groupBy, metrics, cap },
        );
        for (const [i, g] of groupBy.entries()) {
          if (g.type !== 'exact') continue;
          const distinct = new Set(groups.map((r) => JSON.stringify(ownValue(r.key, g.property)))).size;
          if (distinct > g.maxGroups || groups.length > cap) {
            throw new Unprocessable(`${g.property} has more than ${g.maxGroups} distinct values in the set`, [
              {
                path: `body/groupBy/${i}/maxGroups`,
                message: 'is exceeded: narrow the where-clause or raise maxGroups',
              },
            ]);
          }
        }
        await app.consistencyHeader(reply, world, watermark);
        return { groups, commit };
      },
    );
  },
  {
    name: 'onto-intelligence-object-sets',
    dependencies: ['onto-auth', 'onto-intelligence-schema', 'onto-intelligence-consistency'],
  },
);

/** The named fields of a row (`prefix`: the derived fields of a select, without their prefix). */
function pick(values: Record<string, unknown>, names: string[], prefix = ''): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const key = name.slice(prefix.length);
    if (prefix === '' && key.startsWith(DERIVED)) continue;
    if (Object.hasOwn(values, key)) setOwn(out, key, values[key]);
  }
  return out;
}

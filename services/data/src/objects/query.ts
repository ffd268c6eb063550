import { createHash, randomBytes } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  BODY_LIMITS,
  Headers,
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
  problemResponses,
  QueryFaults,
  type SortKey,
  setOwn,
  Unprocessable,
  type WhereNode,
  WORLD_ID,
  withExamples,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { objectTypeOf } from '../schema/lookup.js';
import { pinnedRead } from '../worlds/refs.js';
import { aggregateAnswerExamples, aggregateExamples, queryAnswerExamples, queryExamples } from './examples.js';
import { aggregate, type Chain, queryPage, scanSize } from './sets.js';

const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';
const errors = problemResponses(400, 401, 403, 404, 410, 422, 503);
const Params = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  type: Type.String({ pattern: NAME, description: 'the object type (apiName)' }),
});
const ReadHeaders = Type.Object({
  'x-consistency-token': Headers.consistencyToken('control=<schema version>: wait (bounded) until data has applied it'),
});

const { QueryBody, AggregateBody, AggregateAnswer } = objectSetSchemas();
const ObjectItem = Type.Object({
  type: Type.String(),
  pk: Type.String(),
  version: Type.Integer(),
  properties: Type.Record(Type.String(), Type.Unknown()),
});
const QueryAnswer = Type.Object({
  objects: Type.Array(ObjectItem),
  nextPageToken: Type.Union([Type.String(), Type.Null()]),
  commit: Type.Integer({
    description:
      'the data commit every page of the query reads: `at`, or cut when the first page is read; with read replicas, a request without X-Consistency-Token may read the newest commit a replica has, up to REPLICA_CUT_MS plus its lag older',
  }),
});

export interface QueryOptions {
  /** Objects a query may read without an index narrowing it (QUERY_SCAN_LIMIT). */
  scanLimit: number;
  /** QUERY_TOKEN_SECRET; absent: a random one per process (tokens do not survive a restart). */
  tokenSecret?: string;
  /** QUERY_TOKEN_TTL_SECONDS, in ms. */
  tokenTtlMs?: number;
}

/**
 * Object sets: `POST /v1/worlds/{world}/objects/{type}/query` and `…/aggregate` (docs/adr/0047,
 * 0048). Pages of a query read one commit; tokens are signed and bound to their query.
 */
export default fp(
  async (fastify: FastifyInstance, opts: QueryOptions) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const tokens = new PageTokens(
      opts.tokenSecret ? Buffer.from(opts.tokenSecret, 'utf8') : randomBytes(32),
      opts.tokenTtlMs,
    );
    if (!opts.tokenSecret) app.log.info('QUERY_TOKEN_SECRET unset: page tokens are signed with a per-process key');

    /**
     * The world at the ref asked (a commit; now: a commit cut for the purpose) with its chain and
     * schema, and where to read it: a replica's own cut for a request without a consistency token,
     * else cut or resolved on the primary and read where it has been replayed (docs/adr/0080, 0083).
     */
    async function pinned(request: FastifyRequest, world: string, at: string | undefined, commit: number | null) {
      const { db, point } = await pinnedRead(app, request, world, {
        at,
        commit,
        atField: 'body/at',
        commitField: 'body/pageToken',
      });
      return { db, point, commit: point.commit, chain: point.chain as Chain };
    }

    /** 422 when the where-clause reads more than the scan limit without an index narrowing it. */
    async function checkScan(
      db: pg.Pool,
      chain: Chain,
      typeName: string,
      where: WhereNode | null,
      sortFirst: SortKey | undefined,
      allowScan: boolean | undefined,
      aggregating: boolean,
    ) {
      if (allowScan) return;
      let culprit: { property: string; path: string } | undefined;
      if (where !== null) {
        const access = indexedAccess(where);
        if (!access.indexed) culprit = access;
      } else if (!aggregating && sortFirst && !sortFirst.indexed) {
        culprit = { property: sortFirst.property, path: 'body/orderBy/0/property' };
      }
      if (!culprit) return;
      const size = await scanSize(db, chain, typeName, opts.scanLimit);
      if (size <= opts.scanLimit) return;
      const what = culprit.property
        ? `index ${culprit.property} (indexed: true in the schema) or set allowScan`
        : 'narrow it with a condition on an indexed property or set allowScan';
      throw new Unprocessable(
        `the query reads more than ${opts.scanLimit} ${typeName} objects without an index: ${what}`,
        [
          {
            path: culprit.path || 'body/where',
            message: `is not served by an index and the set has more than ${opts.scanLimit} objects: ${what}`,
          },
        ],
      );
    }

    const faultsOr = (faults: QueryFaults, detail: string) => {
      if (faults.any) throw new BadRequest(detail, faults.list);
    };

    app.post(
      '/v1/worlds/:world/objects/:type/query',
      {
        // A where-clause of 200 conditions with $in lists: bounded as an object's body is.
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['objects'],
          summary: 'Query an object set',
          description:
            'The live objects of the type matching `where`, in `orderBy` order (then the primary key, as text), a page at a time. Every page of one query reads the data commit the first page pinned (`commit`): an object is returned exactly once while writers run. `pivotTo` follows link types from the set and answers the objects reached. Unknown properties, operators, link types, values of the wrong type, a where-clause deeper than 16 or with more than 200 conditions: 400 naming the JSON path. More than QUERY_SCAN_LIMIT objects to read with no index narrowing the where-clause: 422 naming the property to index, unless allowScan. A page token is signed and bound to its query and world: altered or reused for another query, 400; older than QUERY_TOKEN_TTL_SECONDS, 410. A ref before the retained horizon (GET /v1/worlds/{world}/history): 410.',
          params: Params,
          headers: ReadHeaders,
          body: withExamples(QueryBody, queryExamples),
          response: { 200: withExamples(QueryAnswer, queryAnswerExamples), ...errors },
        },
      },
      async (request) => {
        const { world, type: typeName } = request.params;
        const body = request.body;
        await app.awaitSchemaConsistency(request, world);
        const { pageSize: size, pageToken, ...rest } = body;
        const pageSize = size ?? 100;
        const q = createHash('sha256')
          .update(JSON.stringify(['query', world, typeName, rest]))
          .digest('base64url')
          .slice(0, 22);
        const position = pageToken === undefined ? null : tokens.open(pageToken, q);
        const { db, commit, chain, point } = await pinned(request, world, body.at, position?.c ?? null);
        const { type, doc } = await objectTypeOf(app, db, world, typeName, point.schemaVersion);
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
        if (!position) await checkScan(db, chain, typeName, condition, keys[0], body.allowScan, false);
        const rows = await queryPage(db, {
          chain,
          type: target.apiName,
          where: condition,
          keys,
          after: position?.k ?? null,
          limit: pageSize + 1,
        });
        const page = rows.slice(0, pageSize);
        const last = page.at(-1);
        const more = rows.length > pageSize && last !== undefined;
        // The token keeps its commit from retention while it lives (docs/adr/0072).
        if (more) await pinCommit(app.pg, world, commit, tokens.ttlMs);
        return {
          objects: page.map((r) => ({
            type: target.apiName,
            pk: r.pk,
            version: r.version,
            properties: select ? pick(r.properties, select) : r.properties,
          })),
          nextPageToken: more ? tokens.sign({ q, c: commit, k: last.keys, t: Date.now() }) : null,
          commit,
        };
      },
    );

    app.post(
      '/v1/worlds/:world/objects/:type/aggregate',
      {
        // A where-clause of 200 conditions with $in lists: bounded as an object's body is.
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['objects'],
          summary: 'Aggregate an object set',
          description:
            "Metrics of the live objects matching `where`, grouped by up to 3 properties: exact values (`maxGroups` distinct values at most, else 422), numeric ranges (from inclusive, to exclusive; an object counts in every range holding it, and in none outside them) or time buckets of timestamps and dates (UTC; weeks start on Monday). Exact, approximateDistinct included; read at `at` or at a commit cut now (with read replicas, a request without X-Consistency-Token may be answered at the newest commit a replica has, up to REPLICA_CUT_MS plus its lag older; `commit` says which), through a fork's chain. sum and avg of numbers, min and max of ordered values (numbers as numbers, others as their stored text). A where-clause no index narrows over more than QUERY_SCAN_LIMIT objects: 422 unless allowScan.",
          params: Params,
          headers: ReadHeaders,
          body: withExamples(AggregateBody, aggregateExamples),
          response: { 200: withExamples(AggregateAnswer, aggregateAnswerExamples), ...errors },
        },
      },
      async (request) => {
        const { world, type: typeName } = request.params;
        const body = request.body;
        await app.awaitSchemaConsistency(request, world);
        const { db, commit, chain, point } = await pinned(request, world, body.at, null);
        const { type, doc } = await objectTypeOf(app, db, world, typeName, point.schemaVersion);
        const faults = new QueryFaults();
        const where = parseWhere(doc, type, body.where, 'body/where', faults);
        const groupBy = parseGroupBy(type, body.groupBy, faults);
        const metrics = parseMetrics(type, body.metrics, faults);
        faultsOr(faults, 'the aggregation cannot be made as asked');
        await checkScan(db, chain, typeName, where, undefined, body.allowScan, true);
        const cap = groupBy.reduce((n, g) => Math.min(n * (g.type === 'exact' ? g.maxGroups : 1_000), 1_000_000), 1);
        const groups = await aggregate(db, { chain, type: typeName, where, groupBy, metrics, cap });
        for (const [i, g] of groupBy.entries()) {
          if (g.type !== 'exact') continue;
          const distinct = new Set(groups.map((r) => JSON.stringify(ownValue(r.key, g.property)))).size;
          if (distinct > g.maxGroups || groups.length > cap) {
            throw new Unprocessable(`${g.property} has more than ${g.maxGroups} distinct values in the set`, [
              {
                path: `body/groupBy/${i}/maxGroups`,
                message: `is exceeded: narrow the where-clause or raise maxGroups`,
              },
            ]);
          }
        }
        return { groups, commit };
      },
    );
  },
  { name: 'onto-data-object-sets', dependencies: ['onto-auth', 'onto-data-schema'] },
);

function pick(properties: Record<string, unknown>, names: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of names) if (Object.hasOwn(properties, name)) setOwn(out, name, properties[name]);
  return out;
}

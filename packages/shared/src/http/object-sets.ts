/**
 * The HTTP bodies of object-set queries and aggregations (docs/adr/0047, 0075) as TypeBox schemas,
 * and their signed page tokens: one definition for data's `…/objects/{type}/query|aggregate` and
 * intelligence's, so that both documents state the same grammar. `field` is the pattern (without
 * anchors) of a field name: a property in data; a property or `derived.<name>` in intelligence.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { BadRequest, HttpProblem } from '../errors/problem.js';
import { INTERVALS, METRIC_OPS, QUERY_LIMITS } from '../ontology/where.js';

const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';

export function objectSetSchemas(
  field = '[A-Za-z][A-Za-z0-9_]{0,62}',
  /** The refs `at` takes, when the service states them by a pattern (intelligence's). */
  at: { pattern?: string; description: string } = {
    description: 'read at a ref (as ?at= of the reads); absent: now, pinned at a commit cut by the first page',
  },
) {
  const FIELD = `^${field}$`;
  const Scalar = Type.Union([Type.String(), Type.Number(), Type.Boolean()]);
  /** `{<$op>: value, …}` on one property; a bare value means $eq. */
  const Condition = Type.Union([
    Scalar,
    Type.Object(
      {
        $eq: Type.Optional(Scalar),
        $ne: Type.Optional(Scalar),
        $in: Type.Optional(Type.Array(Scalar, { minItems: 1, maxItems: QUERY_LIMITS.inValues })),
        $gt: Type.Optional(Type.Union([Type.String(), Type.Number()])),
        $gte: Type.Optional(Type.Union([Type.String(), Type.Number()])),
        $lt: Type.Optional(Type.Union([Type.String(), Type.Number()])),
        $lte: Type.Optional(Type.Union([Type.String(), Type.Number()])),
        $isNull: Type.Optional(Type.Boolean()),
        $startsWith: Type.Optional(Type.String({ minLength: 1, maxLength: QUERY_LIMITS.operand })),
        $contains: Type.Optional(Scalar),
        $containsAnyTerm: Type.Optional(Type.String({ minLength: 1, maxLength: QUERY_LIMITS.operand })),
        $containsAllTerms: Type.Optional(Type.String({ minLength: 1, maxLength: QUERY_LIMITS.operand })),
      },
      { additionalProperties: false, minProperties: 1 },
    ),
  ]);
  /**
   * A where-clause. Combinators and property conditions may share one object (all ANDed). The
   * property names are checked against the schema, the values against the properties' types, the
   * nesting (at most 16) and the conditions (at most 200) by the service: faults name their path.
   */
  const Where = Type.Recursive(
    (This) =>
      Type.Object(
        {
          $and: Type.Optional(Type.Array(This, { minItems: 1 })),
          $or: Type.Optional(Type.Array(This, { minItems: 1 })),
          $not: Type.Optional(This),
          $link: Type.Optional(
            Type.Object(
              {
                type: Type.String({ pattern: NAME, description: 'a link type with the queried type on one side' }),
                where: Type.Optional(This),
              },
              { additionalProperties: false },
            ),
          ),
        },
        {
          // Type.Record would lose the key pattern in the emitted document: property names are
          // stated with propertyNames.
          additionalProperties: Condition,
          propertyNames: { pattern: `^(\\$(and|or|not|link)|${field})$` },
          description:
            '{$and: [Where]} | {$or: [Where]} | {$not: Where} | {$link: {type, where?}} | {<property>: <value> | {<$op>: value}}; several keys are ANDed',
        },
      ),
    { $id: 'Where' },
  );
  const AtField = Type.Optional(
    Type.String({
      maxLength: 100,
      ...at,
    }),
  );
  const AllowScan = Type.Optional(
    Type.Boolean({
      description: 'read more than QUERY_SCAN_LIMIT objects when no index narrows the where-clause (else 422)',
    }),
  );

  const QueryBody = Type.Object(
    {
      where: Type.Optional(Where),
      orderBy: Type.Optional(
        Type.Array(
          Type.Object(
            {
              property: Type.String({ pattern: FIELD }),
              direction: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')])),
            },
            { additionalProperties: false },
          ),
          { maxItems: QUERY_LIMITS.orderBy },
        ),
      ),
      select: Type.Optional(Type.Array(Type.String({ pattern: FIELD }), { maxItems: 1000 })),
      pageSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
      pageToken: Type.Optional(Type.String({ maxLength: 8192, description: 'nextPageToken of the previous page' })),
      at: AtField,
      pivotTo: Type.Optional(
        Type.Array(Type.String({ pattern: NAME }), {
          minItems: 1,
          maxItems: QUERY_LIMITS.pivotSteps,
          description: 'link types followed in turn from the set; the answer holds the objects reached (deduplicated)',
        }),
      ),
      allowScan: AllowScan,
    },
    { additionalProperties: false },
  );
  const Range = Type.Object(
    { from: Type.Optional(Type.Number()), to: Type.Optional(Type.Number()) },
    { additionalProperties: false, description: 'from inclusive, to exclusive' },
  );
  const GroupBySchema = Type.Union([
    Type.Object(
      {
        property: Type.String({ pattern: FIELD }),
        type: Type.Literal('exact'),
        maxGroups: Type.Optional(
          Type.Integer({
            minimum: 1,
            maximum: QUERY_LIMITS.maxGroups,
            description: `distinct values of this property the answer may hold (default ${QUERY_LIMITS.defaultMaxGroups}); more is a 422`,
          }),
        ),
      },
      { additionalProperties: false },
    ),
    Type.Object(
      {
        property: Type.String({ pattern: FIELD }),
        type: Type.Literal('ranges'),
        ranges: Type.Array(Range, { minItems: 1, maxItems: QUERY_LIMITS.ranges }),
      },
      { additionalProperties: false },
    ),
    Type.Object(
      {
        property: Type.String({ pattern: FIELD }),
        type: Type.Literal('bucket'),
        interval: Type.Union(INTERVALS.map((i) => Type.Literal(i))),
      },
      { additionalProperties: false },
    ),
  ]);
  const AggregateBody = Type.Object(
    {
      where: Type.Optional(Where),
      at: AtField,
      groupBy: Type.Optional(Type.Array(GroupBySchema, { maxItems: QUERY_LIMITS.groupBy })),
      // count counts objects and takes no property; every other op needs the property it measures.
      metrics: Type.Array(
        Type.Union([
          Type.Object(
            { name: Type.String({ minLength: 1, maxLength: 100 }), op: Type.Literal('count') },
            { additionalProperties: false },
          ),
          Type.Object(
            {
              name: Type.String({ minLength: 1, maxLength: 100 }),
              op: Type.Union(METRIC_OPS.filter((o) => o !== 'count').map((o) => Type.Literal(o))),
              property: Type.String({ pattern: FIELD }),
            },
            { additionalProperties: false },
          ),
        ]),
        { minItems: 1, maxItems: QUERY_LIMITS.metrics, description: 'metric names are distinct' },
      ),
      allowScan: AllowScan,
    },
    { additionalProperties: false },
  );
  const AggregateAnswer = Type.Object({
    groups: Type.Array(
      Type.Object({
        key: Type.Record(Type.String(), Type.Unknown(), {
          description: 'per groupBy property: the value (null: objects without one), {from, to} or the bucket start',
        }),
        metrics: Type.Record(Type.String(), Type.Union([Type.Number(), Type.String(), Type.Null()])),
      }),
    ),
    commit: Type.Integer({ description: 'the data commit the answer reflects' }),
  });
  return { Where, AtField, AllowScan, QueryBody, AggregateBody, AggregateAnswer };
}

/**
 * Page tokens: `<payload>.<HMAC-SHA256>` with the server's secret. The payload binds the token to
 * its world and query (a hash of everything in the body but pageSize and pageToken) and carries
 * the pinned commit and where the page ended.
 */
export class PageTokens {
  constructor(
    private readonly secret: Buffer,
    /** How long a token reads its commit (QUERY_TOKEN_TTL_SECONDS): retention keeps the commit that long. */
    readonly ttlMs = 3_600_000,
  ) {}

  private mac(payload: string) {
    return createHmac('sha256', this.secret).update(`onto-query-page\u0000${payload}`).digest();
  }

  /** `t`: when the token was issued (ms since the epoch); it reads its commit for `ttlMs` from then. */
  sign(position: { q: string; c: number; k: unknown[]; t: number }): string {
    const payload = Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
    return `${payload}.${this.mac(payload).toString('base64url')}`;
  }

  /** The position of a token issued for query `q`; 400 naming `body/pageToken` otherwise, 410 once expired. */
  open(token: string, q: string, now = Date.now()): { c: number; k: unknown[] } {
    const fault = (message: string) =>
      new BadRequest(`the page token ${message}`, [{ path: 'body/pageToken', message }]);
    const [payload, mac, ...rest] = token.split('.');
    const given = Buffer.from(mac ?? '', 'base64url');
    const expected = this.mac(payload ?? '');
    if (rest.length > 0 || !payload || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw fault('was not issued by this service or was altered');
    }
    const position = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
    if (position.q !== q) throw fault('belongs to another query (or world): send the same body with it');
    if (!Number.isSafeInteger(position.c) || !Array.isArray(position.k) || !Number.isSafeInteger(position.t)) {
      throw fault('is malformed');
    }
    if ((position.t as number) + this.ttlMs <= now) {
      const message = 'has expired (QUERY_TOKEN_TTL_SECONDS): run the query again';
      throw new HttpProblem(410, 'gone', 'Gone', `the page token ${message}`, {
        errors: [{ path: 'body/pageToken', message }],
      });
    }
    return { c: position.c as number, k: position.k };
  }
}

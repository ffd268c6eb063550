/// <reference types="@fastify/swagger" preserve="true" />
import { randomUUID } from 'node:crypto';
import swagger from '@fastify/swagger';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchema, FastifyServerOptions } from 'fastify';
import fp from 'fastify-plugin';
import { BODY_LIMITS } from '../config/body-limits.js';
import { type KafkaSaslConfig, kafkaSaslOf } from '../config/load.js';
import type { MigrationTrack } from '../db/migrate.js';
import { postgresPlugin } from '../db/postgres.js';
import { BadRequest, installProblemHandlers, ProblemSchema, sendProblem } from '../errors/problem.js';
import { asyncApiDocument } from '../events/asyncapi.js';
import { consumersPlugin } from '../inbox/plugin.js';
import { jobsPlugin } from '../jobs/plugin.js';
import { kafkaPlugin } from '../kafka/plugin.js';
import { outboxPlugin } from '../messaging/plugin.js';
import { redisPlugin } from '../redis/redis.js';
import { logMixin, tracerOf, tracingEnabled } from '../tracing/context.js';
import { traceRequests } from '../tracing/http.js';
import { corsPlugin, DEFAULT_CONSOLE_ORIGINS } from './cors.js';
import { healthPlugin } from './health.js';
import { installBoundedJsonParser, JSON_MAX_DEPTH } from './json-depth.js';
import { metricsPlugin } from './observability.js';
import { validatorCompiler } from './validation.js';

export interface BaseServiceConfig extends KafkaSaslConfig {
  LOG_LEVEL: string;
  DATABASE_URL: string;
  REDIS_URL: string;
  KAFKA_BROKERS: string;
  KAFKA_CLIENT_ID?: string | undefined;
  ONTO_TOPIC_PREFIX: string;
  DB_POOL_MAX: number;
  OUTBOX_BATCH_SIZE: number;
  OUTBOX_RETENTION_HOURS: number;
  INBOX_RETENTION_HOURS: number;
  ONTO_CONSOLE_ORIGIN?: string | undefined;
}

export interface PlatformOptions {
  service: 'control' | 'data' | 'intelligence';
  version: string;
  description: string;
  config: BaseServiceConfig;
  migrations: MigrationTrack[];
  /**
   * Schemas with an `$id` that routes (or their documents) refer to, added beside Problem: added
   * here, before any route, since a later addSchema gives the routes after it Fastify's default
   * validator instead of ours.
   */
  schemas?: { $id?: string }[];
}

const CLIENT_ERRORS = new Map<string | undefined, [number, string]>([
  ['HPE_HEADER_OVERFLOW', [431, 'Request Header Fields Too Large']],
  ['ERR_HTTP_REQUEST_TIMEOUT', [408, 'Request Timeout']],
]);

function clientErrorProblem(error: Error & { code?: string }, socket: import('node:net').Socket) {
  if (error.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const [status, title] = CLIENT_ERRORS.get(error.code) ?? [400, 'Bad Request'];
  const body = JSON.stringify({
    type: `https://onto.dev/problems/${status === 400 ? 'bad-request' : title.toLowerCase().replaceAll(' ', '-')}`,
    title,
    status,
    detail:
      status === 431
        ? 'the request headers are larger than the server accepts'
        : `the request could not be parsed (${error.code ?? 'malformed'})`,
  });
  socket.end(
    `HTTP/1.1 ${status} ${title}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/**
 * A body the route checks itself, documented as what it enforces: Fastify validates the route's
 * lenient `body` (so that a fault is the route's 422 naming its JSON path) while the document
 * states `schema`, the stricter shape the route requires.
 */
export function documentedJsonBody(schema: unknown): { 'x-document-body': unknown } {
  return { 'x-document-body': { required: true, content: { 'application/json': { schema } } } };
}

/**
 * A JSON body that may be left out, to spread into a route's schema: a request without one is
 * validated and handled as `{}` (the defaults), and the document says the body is not required.
 */
export const OPTIONAL_BODY = { 'x-body-optional': true } as const;

/** A request without a body reaches validation as `{}` (OPTIONAL_BODY). */
async function emptyBody(request: FastifyRequest) {
  request.body ??= {};
}

/**
 * `patternProperties` (TypeBox's Record with a key pattern) as OpenAPI 3.1 tools read it:
 * `propertyNames` with the pattern and `additionalProperties` with the value's schema, the same
 * constraint in words @fastify/swagger keeps (it turns `patternProperties` into
 * `additionalProperties` and drops the pattern).
 */
function withPropertyNames(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withPropertyNames);
  if (typeof schema !== 'object' || schema === null) return schema;
  const out: Record<string, unknown> = {};
  // own-key: the keys of the services' own route schemas, never a request's
  for (const [key, value] of Object.entries(schema)) out[key] = withPropertyNames(value);
  const patterns = out.patternProperties as Record<string, unknown> | undefined;
  if (patterns && Object.keys(patterns).length === 1 && !out.properties) {
    const [[pattern, value]] = Object.entries(patterns) as [[string, unknown]];
    delete out.patternProperties;
    // TypeBox's pattern for any string key says nothing.
    if (pattern !== '^(.*)$') out.propertyNames = { pattern };
    out.additionalProperties = value;
  }
  return out;
}

/**
 * A route whose body the server parses or checks itself (bulk NDJSON, documentedJsonBody)
 * documents it as `x-document-body`, a request body in OpenAPI's form (`content` by media type),
 * instead of the schema Fastify validates; key patterns are kept (withPropertyNames).
 */
function documentedBody({ schema, url }: { schema: FastifySchema; url: string }) {
  const { 'x-document-body': body, ...rest } = (schema ?? {}) as Record<string, unknown>;
  const documented = withPropertyNames(rest) as Record<string, unknown>;
  if (body !== undefined) documented.body = withPropertyNames(body);
  return { schema: documented as FastifySchema, url };
}

// As much of an OpenAPI document as the transforms read.
interface OpenApiDocument {
  paths?: Record<string, Record<string, OpenApiOperation | undefined> | undefined>;
}
interface OpenApiOperation {
  parameters?: { in: string; required?: boolean; schema?: { default?: unknown } }[];
  requestBody?: { required?: boolean };
  'x-body-optional'?: boolean;
  responses?: Record<string, { description?: string; content?: Record<string, unknown> }>;
}

const PROBLEM_REF = { $ref: '#/components/schemas/Problem' };
// Answered by the platform, not by routes: for any request, and for any request with a body.
const ANY_REQUEST: Record<string, string> = {
  '414': 'URI Too Long',
  '431': 'Request Header Fields Too Large',
};
const WITH_BODY: Record<string, string> = {
  '400': `Bad Request (malformed JSON, or arrays and objects nested deeper than ${JSON_MAX_DEPTH})`,
  '413': 'Payload Too Large',
  '415': 'Unsupported Media Type',
};

/**
 * The document as the servers answer: every error is application/problem+json, the errors
 * Fastify and Node answer before a route runs (400 for a body, 413, 414, 415, 431) are listed on
 * every operation, and a query parameter with a default is optional.
 */
function problemResponses(doc: OpenApiDocument) {
  for (const item of Object.values(doc.paths ?? {})) {
    for (const method of ['get', 'put', 'post', 'patch', 'delete'] as const) {
      const op = item?.[method];
      if (!op) continue;
      op.responses ??= {};
      const responses = op.responses;
      for (const [status, response] of Object.entries(responses)) {
        const content = response.content;
        if (Number(status) >= 400 && content?.['application/json']) {
          content['application/problem+json'] = content['application/json'];
          delete content['application/json'];
        }
      }
      // A query parameter with a default may be left out (Ajv fills it in): it is not required,
      // whatever TypeBox's non-optional property made of it.
      for (const parameter of op.parameters ?? []) {
        if (parameter.in === 'query' && typeof parameter.schema === 'object' && 'default' in parameter.schema)
          parameter.required = false;
      }
      // swagger marks every body required; OPTIONAL_BODY's routes take a request without one.
      if (op['x-body-optional'] && op.requestBody) op.requestBody.required = false;
      delete op['x-body-optional'];
      const added = { ...ANY_REQUEST, ...(op.requestBody ? WITH_BODY : {}) };
      for (const [status, description] of Object.entries(added)) {
        if (Object.hasOwn(responses, status)) continue;
        responses[status] = { description, content: { 'application/problem+json': { schema: PROBLEM_REF } } };
      }
    }
  }
  return doc;
}

/** A route that takes no query parameters refuses any, as a schema with no properties would. */
async function refuseQuery(request: FastifyRequest) {
  const names = Object.keys(request.query as object);
  if (names.length > 0) {
    throw new BadRequest(`${request.url.split('?')[0]} takes no query parameters`, [
      ...names.map((name) => ({ path: `querystring/${name}`, message: 'must NOT have additional properties' })),
    ]);
  }
}

/** Fastify's own options for every onto service: logging, request ids, limits. */
export function fastifyOptions(config: { LOG_LEVEL: string }): FastifyServerOptions {
  return {
    logger: {
      level: config.LOG_LEVEL,
      redact: ['req.headers.authorization', 'req.headers.cookie'],
      // trace_id and span_id of the active span on each line, when tracing is on (docs/adr/0055).
      ...(tracingEnabled() ? { mixin: logMixin } : {}),
    },
    requestIdHeader: 'x-request-id',
    genReqId: () => randomUUID(),
    // Routes with a body name their own limit (BODY_LIMITS, checked at boot); the rest take the least.
    bodyLimit: BODY_LIMITS.small,
    // Object keys are path parameters and may be long; the routes bound them themselves.
    routerOptions: { maxParamLength: 2048 },
    return503OnClosing: true,
    // Requests Node's parser refuses (headers too large, raw bytes in the path) never reach the
    // router: answer them problem+json too, on the socket, as Fastify's default handler does.
    clientErrorHandler: clientErrorProblem,
    // Errors the router raises before any route runs (a path parameter too long or malformed)
    // answer problem+json like everything else.
    frameworkErrors: (error, request, reply) => {
      const status = (error as { statusCode?: number }).statusCode ?? 400;
      reply.header('x-request-id', request.id);
      void sendProblem(reply as unknown as FastifyReply, {
        type: 'https://onto.dev/problems/bad-request',
        title: status === 414 ? 'URI Too Long' : 'Bad Request',
        status,
        detail: error.message,
        instance: request.url.split('?')[0] ?? request.url,
      });
    },
  };
}

/**
 * Everything a service has before its own routes: problem+json errors, request ids, metrics,
 * health and readiness, OpenAPI, PostgreSQL with migrations, the job runner, Redis, Kafka and the
 * outbox relay.
 */
export const platformPlugin = fp(
  async (app: FastifyInstance, opts: PlatformOptions) => {
    app.decorate('serviceName', opts.service);
    app.setValidatorCompiler(validatorCompiler);
    installProblemHandlers(app);
    // JSON nested deeper than JSON_MAX_DEPTH is a 400 before any handler runs (docs/adr/0036).
    installBoundedJsonParser(app);
    app.addSchema(ProblemSchema);
    for (const schema of opts.schemas ?? []) app.addSchema(schema);
    app.addHook('onRequest', async (request, reply) => {
      reply.header('x-request-id', request.id);
    });
    traceRequests(app, opts.service);
    await app.register(corsPlugin, { origins: opts.config.ONTO_CONSOLE_ORIGIN ?? DEFAULT_CONSOLE_ORIGINS });
    // Every route that takes a body says how large (BODY_LIMITS), or fails at boot.
    app.addHook('onRoute', (route) => {
      // A /v1 query parameter the route does not document is refused (400), on every service alike.
      if (route.url.startsWith('/v1/')) {
        const query = route.schema?.querystring as Record<string, unknown> | undefined;
        if (query === undefined) {
          // No schema (swagger would document an empty one as parameters): refused by a hook instead.
          route.preValidation = [...[route.preValidation ?? []].flat(), refuseQuery] as typeof route.preValidation;
        } else if (query.type === 'object' && query.additionalProperties === undefined) {
          route.schema = { ...route.schema, querystring: { ...query, additionalProperties: false } };
        }
      }
      if ((route.schema as Record<string, unknown> | undefined)?.['x-body-optional']) {
        route.preValidation = [...[route.preValidation ?? []].flat(), emptyBody] as typeof route.preValidation;
      }
      const methods = [route.method].flat();
      if (methods.some((m) => m === 'POST' || m === 'PUT' || m === 'PATCH') && route.bodyLimit === undefined) {
        throw new Error(`${methods.join(',')} ${route.url} has no bodyLimit: every route with a body names its own`);
      }
    });
    // A keep-alive connection whose request was in flight when shutdown began would hold the
    // server open until its idle timeout: answer it with Connection: close instead.
    let closing = false;
    app.addHook('preClose', async () => {
      closing = true;
    });
    app.addHook('onSend', async (_request, reply) => {
      if (closing) reply.header('connection', 'close');
    });

    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: { title: `onto ${opts.service}`, version: opts.version, description: opts.description },
        components: {
          securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
        },
      },
      refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
      transform: documentedBody,
      transformObject: (document) =>
        'openapiObject' in document
          ? (problemResponses(document.openapiObject as OpenApiDocument) as typeof document.openapiObject)
          : document.swaggerObject,
    });
    app.get('/docs/json', { schema: { hide: true } }, async () => app.swagger());
    // The events this service publishes (docs/adr/0020): its part of docs/asyncapi.json.
    const asyncApi = asyncApiDocument(opts.service);
    app.get('/docs/asyncapi.json', { schema: { hide: true } }, async () => asyncApi);

    await app.register(metricsPlugin, { service: opts.service });
    await app.register(healthPlugin, {});
    await app.register(postgresPlugin, {
      connectionString: opts.config.DATABASE_URL,
      poolMax: opts.config.DB_POOL_MAX,
      applicationName: `onto-${opts.service}`,
      migrations: opts.migrations,
    });
    await app.register(jobsPlugin, {});
    await app.register(redisPlugin, { url: opts.config.REDIS_URL });
    await app.register(kafkaPlugin, {
      brokers: opts.config.KAFKA_BROKERS.split(','),
      clientId: opts.config.KAFKA_CLIENT_ID ?? `onto-${opts.service}`,
      topicPrefix: opts.config.ONTO_TOPIC_PREFIX,
      sasl: kafkaSaslOf(opts.config),
    });
    await app.register(outboxPlugin, {
      tracer: tracerOf(opts.service),
      batchSize: opts.config.OUTBOX_BATCH_SIZE,
      retentionMs: opts.config.OUTBOX_RETENTION_HOURS * 3600_000,
    });
    await app.register(consumersPlugin, {
      retentionMs: opts.config.INBOX_RETENTION_HOURS * 3600_000,
      tracer: tracerOf(opts.service),
    });
  },
  { name: 'onto-platform' },
);

import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/** One fault in a request, located by JSON path (`/properties/amount`) or header name. */
export interface FieldError {
  path: string;
  message: string;
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  errors?: FieldError[];
  [extension: string]: unknown;
}

const TYPE_BASE = 'https://onto.dev/problems/';

/** The error hierarchy every route throws; mapped to problem+json in one place. */
export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    readonly slug: string,
    readonly title: string,
    detail?: string,
    readonly extensions: { errors?: FieldError[]; [k: string]: unknown } = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? title);
  }
  get detail(): string {
    return this.message;
  }
}

export class BadRequest extends HttpProblem {
  constructor(detail: string, errors?: FieldError[]) {
    super(400, 'bad-request', 'Bad Request', detail, errors ? { errors } : {});
  }
}
export class Unauthorized extends HttpProblem {
  constructor(detail = 'a valid bearer token is required') {
    super(401, 'unauthorized', 'Unauthorized', detail, {}, { 'www-authenticate': 'Bearer' });
  }
}
export class Forbidden extends HttpProblem {
  constructor(detail: string) {
    super(403, 'forbidden', 'Forbidden', detail);
  }
}
export class NotFound extends HttpProblem {
  constructor(detail: string) {
    super(404, 'not-found', 'Not Found', detail);
  }
}
export class Conflict extends HttpProblem {
  constructor(detail: string, extensions: Record<string, unknown> = {}) {
    super(409, 'conflict', 'Conflict', detail, extensions);
  }
}
export class PreconditionFailed extends HttpProblem {
  constructor(detail: string, extensions: Record<string, unknown> = {}) {
    super(412, 'precondition-failed', 'Precondition Failed', detail, extensions);
  }
}
export class PayloadTooLarge extends HttpProblem {
  constructor(detail: string) {
    super(413, 'payload-too-large', 'Payload Too Large', detail);
  }
}
export class Unprocessable extends HttpProblem {
  constructor(detail: string, errors: FieldError[]) {
    super(422, 'unprocessable', 'Unprocessable Content', detail, { errors });
  }
}
export class Unavailable extends HttpProblem {
  constructor(detail: string, retryAfterSeconds = 1) {
    super(
      503,
      'unavailable',
      'Service Unavailable',
      detail,
      {},
      {
        'retry-after': String(retryAfterSeconds),
      },
    );
  }
}

export function sendProblem(reply: FastifyReply, problem: ProblemBody, headers: Record<string, string> = {}) {
  return reply.code(problem.status).headers(headers).type('application/problem+json').send(problem);
}

/** Maps everything a route can throw to application/problem+json; a 5xx never shows internals. */
export function installProblemHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | HttpProblem, request: FastifyRequest, reply) => {
    const instance = request.url.split('?')[0];
    if (error instanceof HttpProblem) {
      if (error.status >= 500) request.log.warn({ err: error }, error.message);
      return sendProblem(
        reply,
        {
          // Extensions first: they can never replace the standard members.
          ...error.extensions,
          type: TYPE_BASE + error.slug,
          title: error.title,
          status: error.status,
          detail: error.detail,
          instance,
        },
        error.headers,
      );
    }
    if (error.validation) {
      const errors = error.validation.map((v) => ({
        path: fieldPath(error.validationContext, v.instancePath, v.params),
        message: v.message ?? 'is invalid',
      }));
      return sendProblem(reply, {
        type: `${TYPE_BASE}validation`,
        title: 'Bad Request',
        status: 400,
        detail: `request ${error.validationContext ?? 'input'} is invalid: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`,
        instance,
        errors,
      });
    }
    const status = typeof error.statusCode === 'number' && error.statusCode >= 400 ? error.statusCode : 500;
    if (status >= 500) {
      request.log.error({ err: error }, 'request failed');
      return sendProblem(reply, {
        type: `${TYPE_BASE}internal`,
        title: 'Internal Server Error',
        status,
        detail: 'the server failed to handle the request; the request id is in the x-request-id header',
        instance,
      });
    }
    // Fastify's own 4xx (malformed JSON, unsupported media type, body too large): the message is safe.
    return sendProblem(reply, {
      type: TYPE_BASE + (FASTIFY_CODES.get(error.code) ?? slug(titleFor(status))),
      title: titleFor(status),
      status,
      detail: error.message,
      instance,
    });
  });

  // Every route's path as a pattern with the methods it answers, for 405's Allow.
  const routes: { pattern: RegExp; methods: string[] }[] = [];
  app.addHook('onRoute', (route) => {
    if (route.url.includes('*')) return;
    const methods = [route.method].flat().filter((m) => m !== 'OPTIONS');
    const source = route.url
      .split('/')
      .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('/');
    routes.push({ pattern: new RegExp(`^${source}/?$`), methods });
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? request.url;
    const allowed = [...new Set(routes.filter((r) => r.pattern.test(path)).flatMap((r) => r.methods))];
    // A path that exists under other methods: 405 with what it answers (RFC 9110, 15.5.6).
    if (allowed.length > 0) {
      return sendProblem(
        reply,
        {
          type: `${TYPE_BASE}method-not-allowed`,
          title: 'Method Not Allowed',
          status: 405,
          detail: `${path} answers ${allowed.join(', ')}, not ${request.method}`,
          instance: path,
        },
        { allow: allowed.join(', ') },
      );
    }
    return sendProblem(reply, {
      type: `${TYPE_BASE}not-found`,
      title: 'Not Found',
      status: 404,
      detail: `no route for ${request.method} ${path}`,
      instance: path,
    });
  });
}

function fieldPath(context: string | undefined, instancePath: string, params: Record<string, unknown>) {
  const missing = typeof params.missingProperty === 'string' ? `/${params.missingProperty}` : '';
  const extra = typeof params.additionalProperty === 'string' ? `/${params.additionalProperty}` : '';
  return `${context ?? ''}${instancePath}${missing}${extra}` || '/';
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  409: 'Conflict',
  411: 'Length Required',
  412: 'Precondition Failed',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
};

/** A Map: an error's `code` is whatever the thrower set, `constructor` included. */
const FASTIFY_CODES = new Map([
  ['FST_ERR_CTP_INVALID_JSON_BODY', 'malformed-json'],
  ['FST_ERR_CTP_EMPTY_JSON_BODY', 'malformed-json'],
  ['FST_ERR_CTP_BODY_TOO_LARGE', 'payload-too-large'],
  ['FST_ERR_CTP_INVALID_MEDIA_TYPE', 'unsupported-media-type'],
]);

const slug = (title: string) => title.toLowerCase().replaceAll(' ', '-');

function titleFor(status: number): string {
  return TITLES[status] ?? 'Client Error';
}

/** The response schema of every problem, for the OpenAPI document. */
export const ProblemSchema = {
  $id: 'Problem',
  type: 'object',
  required: ['type', 'title', 'status'],
  properties: {
    type: { type: 'string' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    instance: { type: 'string' },
    errors: {
      type: 'array',
      items: {
        type: 'object',
        required: ['path', 'message'],
        properties: { path: { type: 'string' }, message: { type: 'string' } },
      },
    },
  },
  additionalProperties: true,
} as const;

/** A route's answer to a problem status: the shared Problem schema, by reference. */
export const PROBLEM_RESPONSE: { $ref: string } = { $ref: 'Problem#' };

/**
 * The problem statuses a route can answer, for its response schema: `{ 404: Problem, … }`. Typed
 * with string keys: numeric ones would narrow the routes' reply typing, which they are not written for.
 */
export function problemResponses<const S extends number>(...statuses: S[]): { [K in `${S}`]: { $ref: string } } {
  return Object.fromEntries(statuses.map((status) => [status, PROBLEM_RESPONSE])) as {
    [K in `${S}`]: { $ref: string };
  };
}

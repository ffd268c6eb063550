import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/**
 * CORS for the console (docs/adr/0044): it is served by control, so its calls to data and
 * intelligence are cross-origin. Only the origins named are allowed; authentication stays the
 * bearer token (no cookies), so an allowed origin gains nothing a script could not send anyway.
 */
export const DEFAULT_CONSOLE_ORIGINS = 'http://127.0.0.1:4001,http://localhost:4001';

const ALLOW_HEADERS =
  'authorization, content-type, if-match, idempotency-key, last-event-id, x-consistency-token, x-request-id';
const EXPOSE_HEADERS = 'etag, location, retry-after, x-consistency-token, x-request-id';

export const corsPlugin = fp(
  async (app: FastifyInstance, opts: { origins: string }) => {
    const origins = new Set(
      opts.origins
        .split(',')
        .map((o) => o.trim().replace(/\/$/, ''))
        .filter(Boolean),
    );
    const any = origins.has('*');
    app.addHook('onRequest', async (request, reply) => {
      const origin = request.headers.origin;
      if (origin === undefined || !(any || origins.has(origin))) return;
      reply.header('access-control-allow-origin', origin);
      reply.header('vary', 'origin');
      reply.header('access-control-expose-headers', EXPOSE_HEADERS);
      // A preflight has no route of its own: answer it here, before routing says 404.
      if (request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined) {
        reply.header('access-control-allow-methods', 'GET, POST, PUT, PATCH, DELETE');
        reply.header('access-control-allow-headers', ALLOW_HEADERS);
        reply.header('access-control-max-age', '600');
        return reply.code(204).send();
      }
    });
  },
  { name: 'onto-cors' },
);

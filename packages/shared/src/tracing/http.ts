import { type Context, context, ROOT_CONTEXT, type Span, SpanKind, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { endSpan, TRACED_LOGGER, tracerOf, tracingEnabled } from './context.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's server span and the context it is active in, when tracing is on. */
    [TRACE]?: { span: Span; context: Context };
  }
}

const TRACE: unique symbol = Symbol('onto.trace');
const w3c = new W3CTraceContextPropagator();
const headerGetter = {
  keys: (carrier: FastifyRequest['headers']) => Object.keys(carrier),
  // own-key: the propagator asks only for its own header names (traceparent, tracestate)
  get: (carrier: FastifyRequest['headers'], key: string) => carrier[key],
};

/**
 * A server span per request, the child of the request's `traceparent` (a missing or malformed
 * one starts a new trace), active while its route's handler runs: events the handler writes
 * carry it (the outbox), and its log lines name it (`trace_id`, `span_id`). Nothing is added
 * when tracing is off. Registered before the routes: it wraps each route's handler.
 */
export function traceRequests(app: FastifyInstance, service: string): void {
  if (!tracingEnabled()) return;
  const tracer = tracerOf(service);
  app.addHook('onRequest', async (request, reply) => {
    const parent = w3c.extract(ROOT_CONTEXT, request.headers, headerGetter);
    const route = request.routeOptions.url;
    const span = tracer.startSpan(
      route ? `${request.method} ${route}` : request.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'http.request.method': request.method,
          ...(route ? { 'http.route': route } : {}),
          'url.path': request.url.split('?')[0] ?? request.url,
          'onto.request_id': String(request.id),
        },
      },
      parent,
    );
    request[TRACE] = { span, context: trace.setSpan(parent, span) };
    const { traceId, spanId } = span.spanContext();
    // Fastify's own lines (request completed, errors) come from outside the handler's context.
    const log = request.log.child({ trace_id: traceId, span_id: spanId });
    (log as unknown as Record<symbol, boolean>)[TRACED_LOGGER] = true;
    request.log = log;
    reply.log = log;
  });
  app.addHook('onResponse', async (request, reply) => {
    const traced = request[TRACE];
    if (!traced) return;
    traced.span.setAttribute('http.response.status_code', reply.statusCode);
    endSpan(traced.span, reply.statusCode >= 500 ? new Error(`HTTP ${reply.statusCode}`) : undefined);
  });
  app.addHook('onRoute', (route) => {
    const handler = route.handler;
    route.handler = function traced(this: FastifyInstance, request, reply) {
      const ctx = request[TRACE]?.context;
      return ctx ? context.with(ctx, handler, this, request, reply) : handler.call(this, request, reply);
    };
  });
}

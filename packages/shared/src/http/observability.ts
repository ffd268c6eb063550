import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { collectDefaultMetrics, Histogram, Registry } from 'prom-client';

declare module 'fastify' {
  interface FastifyInstance {
    /** This app's Prometheus registry; components register their own metrics on it. */
    metrics: Registry;
  }
}

/** Process metrics and an HTTP latency histogram by route and status, served at /metrics. */
export const metricsPlugin = fp(
  async (app: FastifyInstance, opts: { service: string }) => {
    // One registry per app, so that several apps in one test process do not collide.
    const registry = new Registry();
    registry.setDefaultLabels({ service: opts.service });
    // The event-loop delay is sampled every 100 ms, not prom-client's 10: a timer a hundred times
    // a second was 6-7 ms of CPU a second in an idle process here, per service (ADR 19). The
    // histogram still sees every stall longer than a sample's interval.
    collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 });
    const latency = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency by method, route and status',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    });
    app.decorate('metrics', registry);

    app.addHook('onResponse', async (request, reply) => {
      // Unmatched URLs share one label so that scanners cannot blow up the series count.
      const route = request.routeOptions.url ?? '(unmatched)';
      latency.observe({ method: request.method, route, status: String(reply.statusCode) }, reply.elapsedTime / 1000);
    });

    app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
      reply.type(registry.contentType);
      return registry.metrics();
    });
  },
  { name: 'onto-metrics' },
);

// The tracing baseline's http.ts (bench/without-tracing/make.sh): no request hooks at all.
import type { FastifyInstance } from 'fastify';

export function traceRequests(_app: FastifyInstance, _service: string): void {}

import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

import { CheckFailed, type ReadinessCheck, withTimeout } from '../readiness.js';

export interface ReadinessCheckOptions {
  /**
   * Whether the service cannot work without the dependency: down, /ready answers 503. Otherwise
   * the service works around it (Redis, a fast path; Kafka, behind the outbox) and /ready answers
   * 200 `degraded`. Required unless said (ADR 22).
   */
  required?: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Register a dependency that /ready reports on. */
    addReadinessCheck(name: string, check: ReadinessCheck, options?: ReadinessCheckOptions): void;
  }
}

const CheckResult = Type.Object({
  status: Type.Union([Type.Literal('up'), Type.Literal('down')]),
  error: Type.Optional(Type.String()),
  lagMs: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
  boundMs: Type.Optional(Type.Number()),
});

const ReadyResponse = Type.Object({
  status: Type.Union([Type.Literal('ready'), Type.Literal('degraded'), Type.Literal('unavailable')]),
  checks: Type.Record(Type.String(), CheckResult),
});

/**
 * /health says the process is alive; /ready names each dependency's state and answers 503 only
 * when a required one is down (`degraded`, 200, when only others are).
 */
export const healthPlugin = fp(
  async (app: FastifyInstance, opts: { checkTimeoutMs?: number }) => {
    const timeoutMs = opts.checkTimeoutMs ?? 2000;
    const checks = new Map<string, { check: ReadinessCheck; required: boolean }>();
    app.decorate('addReadinessCheck', (name: string, check: ReadinessCheck, options: ReadinessCheckOptions = {}) => {
      checks.set(name, { check, required: options.required ?? true });
    });

    app.get(
      '/health',
      { schema: { tags: ['operations'], response: { 200: Type.Object({ status: Type.Literal('alive') }) } } },
      async () => ({ status: 'alive' as const }),
    );

    app.get(
      '/ready',
      { schema: { tags: ['operations'], response: { 200: ReadyResponse, 503: ReadyResponse } } },
      async (_request, reply) => {
        const entries = await Promise.all(
          [...checks].map(async ([name, { check, required }]) => {
            try {
              const details = await withTimeout(check(), timeoutMs, `${name} did not answer within ${timeoutMs} ms`);
              return [name, required, { status: 'up' as const, ...(details ?? {}) }] as const;
            } catch (error) {
              const details = error instanceof CheckFailed ? error.details : {};
              return [
                name,
                required,
                { status: 'down' as const, error: (error as Error).message, ...details },
              ] as const;
            }
          }),
        );
        const down = entries.filter(([, , result]) => result.status === 'down');
        const status = down.some(([, required]) => required)
          ? ('unavailable' as const)
          : down.length > 0
            ? ('degraded' as const)
            : ('ready' as const);
        reply.code(status === 'unavailable' ? 503 : 200);
        return { status, checks: Object.fromEntries(entries.map(([name, , result]) => [name, result])) };
      },
    );
  },
  { name: 'onto-health' },
);

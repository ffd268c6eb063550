import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

export type ReadinessCheck = () => Promise<void>;

declare module 'fastify' {
  interface FastifyInstance {
    /** Register a dependency that /ready must find healthy. */
    addReadinessCheck(name: string, check: ReadinessCheck): void;
  }
}

const CheckResult = Type.Object({
  status: Type.Union([Type.Literal('up'), Type.Literal('down')]),
  error: Type.Optional(Type.String()),
});

const ReadyResponse = Type.Object({
  status: Type.Union([Type.Literal('ready'), Type.Literal('unavailable')]),
  checks: Type.Record(Type.String(), CheckResult),
});

/** /health says the process is alive; /ready says whether every dependency answers. */
export const healthPlugin = fp(
  async (app: FastifyInstance, opts: { checkTimeoutMs?: number }) => {
    const timeoutMs = opts.checkTimeoutMs ?? 2000;
    const checks = new Map<string, ReadinessCheck>();
    app.decorate('addReadinessCheck', (name: string, check: ReadinessCheck) => {
      checks.set(name, check);
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
          [...checks].map(async ([name, check]) => {
            try {
              await withTimeout(check(), timeoutMs, `${name} did not answer within ${timeoutMs} ms`);
              return [name, { status: 'up' as const }] as const;
            } catch (error) {
              return [name, { status: 'down' as const, error: (error as Error).message }] as const;
            }
          }),
        );
        const ready = entries.every(([, result]) => result.status === 'up');
        reply.code(ready ? 200 : 503);
        return { status: ready ? ('ready' as const) : ('unavailable' as const), checks: Object.fromEntries(entries) };
      },
    );
  },
  { name: 'onto-health' },
);

export async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

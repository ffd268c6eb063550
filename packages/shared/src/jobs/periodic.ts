import type { FastifyInstance } from 'fastify';

/**
 * Runs `task` every `intervalMs` on the service's job runner (docs/adr/0051): once per period
 * across every instance of the service, never two rounds at once; a failed round is logged (once
 * per streak of failures) and the next period tries again. Call it while the app registers.
 */
export function runPeriodically(app: FastifyInstance, what: string, intervalMs: number, task: () => Promise<unknown>) {
  let failing = false;
  app.jobs.every(`periodic: ${what}`, intervalMs, async () => {
    try {
      await task();
      if (failing) app.log.info(`${what} works again`);
      failing = false;
    } catch (err) {
      if (!failing) app.log.warn({ err }, `${what} failed; retrying every ${intervalMs} ms`);
      failing = true;
    }
  });
}

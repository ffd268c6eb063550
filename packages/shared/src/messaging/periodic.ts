import type { FastifyInstance } from 'fastify';

/**
 * Runs `task` every `intervalMs` while the app is ready, never two rounds at once; a failed
 * round is logged (once per streak of failures) and the next one tries again.
 */
export function runPeriodically(app: FastifyInstance, what: string, intervalMs: number, task: () => Promise<unknown>) {
  let timer: NodeJS.Timeout | undefined;
  let round: Promise<void> | undefined;
  let failing = false;
  app.addHook('onReady', async () => {
    timer = setInterval(() => {
      if (round) return;
      round = task()
        .then(() => {
          if (failing) app.log.info(`${what} works again`);
          failing = false;
        })
        .catch((err) => {
          if (!failing) app.log.warn({ err }, `${what} failed; retrying every ${intervalMs} ms`);
          failing = true;
        })
        .finally(() => {
          round = undefined;
        });
    }, intervalMs);
    timer.unref();
  });
  app.addHook('onClose', async () => {
    clearInterval(timer);
    // A round stuck behind a lock must not hold the shutdown; the pool's end cuts it off.
    let bound: NodeJS.Timeout | undefined;
    await Promise.race([round, new Promise((resolve) => (bound = setTimeout(resolve, 2000)))]);
    clearTimeout(bound);
  });
}

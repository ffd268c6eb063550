import { runPeriodically } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { type CheckerOptions, ConsistencyChecker } from './checker.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The consistency checker (docs/adr/0032); `runCheck()` runs one check now. */
    checker: ConsistencyChecker;
  }
}

/** Runs the consistency checker every `intervalMs` (0: only on demand, through `app.checker.runCheck()`). */
export default fp(
  async (app: FastifyInstance, opts: CheckerOptions & { intervalMs: number }) => {
    const checker = new ConsistencyChecker(app.pg, app.broker, app.topicPrefix, app.log, app.metrics, opts);
    app.decorate('checker', checker);
    if (opts.intervalMs > 0) {
      runPeriodically(app, 'checking consistency', opts.intervalMs, async () => {
        // A little less than the interval: this replica's own previous run does not skip this one.
        const findings = await checker.runCheck({ unlessRanWithinMs: opts.intervalMs * 0.9 });
        // Another replica checked: export its findings, not this replica's older ones.
        if (findings === null) await checker.refreshFindingsGauge();
        else if (findings.length > 0) {
          app.log.warn({ findings: findings.length }, 'the consistency checker found drift and asked for repairs');
        }
      });
    }
    app.addHook('onClose', async () => checker.close());
  },
  { name: 'onto-control-checker' },
);

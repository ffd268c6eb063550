import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { JobRunner } from './runner.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The service's job runner (docs/adr/0051): define tasks while registering, it starts once ready. */
    jobs: JobRunner;
  }
}

export interface JobsPluginOptions {
  pollMs?: number;
}

/**
 * The job runner beside the service: tasks are defined while plugins register; it starts once
 * the app is ready (after every plugin's own onReady) and stops on close, before the pool ends.
 */
export const jobsPlugin = fp(
  async (app: FastifyInstance, opts: JobsPluginOptions) => {
    const runner = new JobRunner({
      pool: app.pg,
      logger: app.log.child({ component: 'jobs' }),
      ...(opts.pollMs === undefined ? {} : { pollMs: opts.pollMs }),
    });
    app.decorate('jobs', runner);
    app.addHook('onReady', async () => {
      // Deferred to the end of the ready sequence: the handlers use what later plugins start on ready.
      setImmediate(() => {
        runner.start().catch((err) => app.log.error({ err }, 'the job runner did not start'));
      });
    });
    app.addHook('onClose', async () => runner.stop());
  },
  { name: 'onto-jobs', dependencies: ['onto-postgres'] },
);

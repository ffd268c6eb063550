import { runPeriodically } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { PositionAnnouncer } from './announcer.js';

/** data's side of the version vector: `storage.position` per world, at most once per interval. */
export default fp(
  async (app: FastifyInstance, opts: { intervalMs: number }) => {
    const announcer = new PositionAnnouncer(app.pg, app.topicPrefix);
    runPeriodically(app, 'announcing data positions', opts.intervalMs, () => announcer.tick());
  },
  { name: 'onto-data-positions' },
);

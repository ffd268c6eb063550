import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { maintainPartitions } from './maintenance.js';
import seriesRoutes from './routes.js';

/** Time series of objects (docs/adr/0028): the routes, and the partitions kept ahead and dropped past retention. */
export default fp(
  async (app: FastifyInstance) => {
    await app.register(seriesRoutes);
    // At start (a new deployment's first run is due at once), then hourly, on one replica.
    const log = app.log.child({ component: 'series-partitions' });
    app.jobs.every('data.series-partitions', 3_600_000, async () => {
      const dropped = await maintainPartitions(app.pg);
      if (dropped.length > 0) log.info({ dropped }, 'series partitions past retention dropped');
    });
  },
  { name: 'onto-data-series', dependencies: ['onto-auth', 'onto-data-schema', 'onto-jobs'] },
);

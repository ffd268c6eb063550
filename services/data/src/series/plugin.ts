import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { PartitionMaintenance } from './maintenance.js';
import seriesRoutes from './routes.js';

/** Time series of objects (docs/adr/0028): the routes, and the partitions kept ahead and dropped past retention. */
export default fp(
  async (app: FastifyInstance) => {
    await app.register(seriesRoutes);
    const maintenance = new PartitionMaintenance(app.pg, app.log.child({ component: 'series-partitions' }));
    app.addHook('onReady', async () => maintenance.start());
    app.addHook('onClose', async () => maintenance.stop());
  },
  { name: 'onto-data-series', dependencies: ['onto-auth', 'onto-data-schema'] },
);

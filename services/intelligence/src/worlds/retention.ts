import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { HistoryPruner, type PrunerOptions } from '../readmodel/retention.js';
import { stateAt } from './ref.js';

/**
 * The pruner of intelligence's versioned read model and decision history (docs/adr/0073, 0077) as a recurring job: a pass
 * per world whose horizon data moved, batch after batch, then idle until the next horizon.
 */
export default fp(
  async (app: FastifyInstance, opts: PrunerOptions) => {
    const pruner = new HistoryPruner(app.pg, app.metrics, opts, async (db, world, commit) => {
      return (await stateAt(db, world, commit)).moment;
    });
    app.jobs.every('intelligence.prune-history', 1000, async () => {
      const again = await pruner.step();
      return again === undefined ? undefined : { rerunInMs: again };
    });
  },
  { name: 'onto-intelligence-retention', dependencies: ['onto-jobs'] },
);

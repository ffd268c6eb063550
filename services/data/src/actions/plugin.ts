import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { applyActionEvents } from './apply.js';

/**
 * data's side of intelligence's action sagas: consumer `data-actions` on domain.actions applies
 * each requested step through data's write path and replies on the same key (see apply.ts).
 */
export default fp(
  async (app: FastifyInstance) => {
    app.addConsumer({
      name: 'data-actions',
      topics: ['domain.actions'],
      apply: applyActionEvents(app, app.log.child({ component: 'action-steps' })),
    });
  },
  { name: 'onto-data-actions', dependencies: ['onto-consumers', 'onto-data-schema'] },
);

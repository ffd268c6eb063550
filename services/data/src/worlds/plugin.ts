import { worldProvisioning } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/** This service's side of the world lifecycle saga (see worldProvisioning). */
export default fp(
  async (app: FastifyInstance) => {
    app.addConsumer({
      name: 'data-worlds',
      topics: ['onto.worlds'],
      apply: worldProvisioning('data', app.topicPrefix),
    });
  },
  { name: 'onto-data-worlds', dependencies: ['onto-consumers'] },
);

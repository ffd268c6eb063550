import { worldProvisioning } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/** This service's side of the world lifecycle saga (see worldProvisioning). */
export default fp(
  async (app: FastifyInstance) => {
    app.addConsumer({
      name: 'intelligence-worlds',
      topics: ['onto.worlds'],
      apply: worldProvisioning('intelligence', app.topicPrefix),
    });
  },
  { name: 'onto-intelligence-worlds', dependencies: ['onto-consumers'] },
);

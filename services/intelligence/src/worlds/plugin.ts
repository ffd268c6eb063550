import { worldProvisioning } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { checkerAnswers } from '../checker/answers.js';

/** This service's side of the world lifecycle saga (see worldProvisioning). */
export default fp(
  async (app: FastifyInstance) => {
    const provisioning = worldProvisioning('intelligence', app.topicPrefix);
    const answerChecker = checkerAnswers(app.topicPrefix);
    app.addConsumer({
      name: 'intelligence-worlds',
      topics: ['onto.worlds'],
      apply: async (tx, events) => {
        await provisioning(tx, events);
        await answerChecker(tx, events);
      },
    });
  },
  { name: 'onto-intelligence-worlds', dependencies: ['onto-consumers'] },
);

import { type WorldOrigin, worldProvisioning } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { lockWorlds } from '../engine/locks.js';
import { copyDefinitions } from './fork.js';

/** This service's side of the world lifecycle saga (see worldProvisioning); a fork starts with its base's definitions. */
export default fp(
  async (app: FastifyInstance) => {
    const provision = worldProvisioning('intelligence', app.topicPrefix, {
      provision: async (tx, worldId, from) => {
        if (from) await copyDefinitions(tx, app.schemaReplica, worldId, from);
        return undefined;
      },
    });
    app.addConsumer({
      name: 'intelligence-worlds',
      topics: ['onto.worlds'],
      apply: async (tx, events) => {
        // The forks of the batch locked at once, in the one order all lockers use (see lockWorlds).
        await lockWorlds(
          tx,
          events
            .filter((e) => e.event.type === 'world.created' && (e.event.payload.from as WorldOrigin | null))
            .map((e) => e.event.world_id),
        );
        await provision(tx, events);
      },
    });
  },
  { name: 'onto-intelligence-worlds', dependencies: ['onto-consumers'] },
);

import { worldProvisioning } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { lockWorldForDrop } from '../http.js';
import { dropWorldSeries } from '../series/repository.js';

/**
 * Removes a world's objects, links, their history and its schema replica. The world's drop lock
 * is taken first: writes in flight finish before, later ones find the world gone (404).
 */
async function dropWorld(tx: pg.ClientBase, worldId: string): Promise<void> {
  await lockWorldForDrop(tx, worldId);
  for (const table of ['object_heads', 'object_history', 'link_heads', 'link_history', 'schema_versions']) {
    await tx.query(`DELETE FROM ${table} WHERE world_id = $1`, [worldId]);
  }
  await dropWorldSeries(tx, worldId);
}

/** This service's side of the world lifecycle saga (see worldProvisioning). */
export default fp(
  async (app: FastifyInstance) => {
    app.addConsumer({
      name: 'data-worlds',
      topics: ['onto.worlds'],
      apply: worldProvisioning('data', app.topicPrefix, { drop: dropWorld }),
    });
  },
  { name: 'onto-data-worlds', dependencies: ['onto-consumers'] },
);

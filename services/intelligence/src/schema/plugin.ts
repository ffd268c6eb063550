import { type ApplyEffects, SchemaReplica, storeSchemaVersion } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

declare module 'fastify' {
  interface FastifyInstance {
    /** intelligence's replica of every world's schema: object, link and action types. */
    schemaReplica: SchemaReplica;
  }
}

/** The effect of `schema.updated`: the version is stored; the highest stored one is applied. */
export const applySchemaEvents: ApplyEffects = async (tx, events) => {
  for (const { event } of events) {
    if (event.type === 'schema.updated') await storeSchemaVersion(tx, event);
  }
};

/**
 * intelligence's replica of every world's schema (consumer `intelligence-schema` on onto.schema):
 * what derived properties and rules are checked against and what actions execute.
 */
export default fp(
  async (app: FastifyInstance, opts: { waitBoundMs: number }) => {
    app.decorate('schemaReplica', new SchemaReplica(app.pg, opts.waitBoundMs));
    app.addConsumer({ name: 'intelligence-schema', topics: ['onto.schema'], apply: applySchemaEvents });
  },
  { name: 'onto-intelligence-schema', dependencies: ['onto-consumers'] },
);

import { NotFound, type Queryable } from '@onto/shared';
import type { FastifyInstance } from 'fastify';

export const notProvisioned = (world: string) =>
  new NotFound(`world ${world} does not exist here (not provisioned in data)`);

/** The object type named in a path, in the schema version the caller read; 404 when unknown. */
export async function objectTypeOf(app: FastifyInstance, db: Queryable, world: string, name: string, version: number) {
  const doc = await app.schemaReplica.document(db, world, version);
  const type = Object.hasOwn(doc.objectTypes, name) ? doc.objectTypes[name] : undefined;
  if (!type) {
    throw new NotFound(`object type ${name} is not in the schema of world ${world} (version ${version} applied here)`);
  }
  return { type, doc };
}

/** The link type named in a path, in the schema version the caller read; 404 when unknown. */
export async function linkTypeOf(app: FastifyInstance, db: Queryable, world: string, name: string, version: number) {
  const doc = await app.schemaReplica.document(db, world, version);
  const type = Object.hasOwn(doc.linkTypes, name) ? doc.linkTypes[name] : undefined;
  if (!type) {
    throw new NotFound(`link type ${name} is not in the schema of world ${world} (version ${version} applied here)`);
  }
  return { type, doc };
}

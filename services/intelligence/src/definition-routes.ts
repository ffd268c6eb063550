/**
 * The HTTP skeleton of a per-world definition (derived properties, rules, decision definitions):
 * `PUT|GET|DELETE /v1/worlds/{world}/<path>/{name}` and the list. Conditional writes, the
 * consistency token, the world's transaction and the problem responses are the same for every
 * kind; each kind says what its body is, how it is checked and saved, and how it is shown.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BODY_LIMITS,
  type FieldError,
  ifMatch,
  NotFound,
  recordAudit,
  type SchemaDocument,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { type Static, type TObject, type TProperties, type TSchema, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { FastifyInstance, FastifySchema } from 'fastify';
import type pg from 'pg';
import type { Definition } from './definitions.js';
import type { Engine } from './engine/engine.js';
import { bumpRevision } from './engine/locks.js';
import { finishRecomputes, type RecomputeProgress, recomputeOf, requestRecompute } from './engine/recompute-jobs.js';
import {
  AtState,
  checkIfMatch,
  DEFINITION_IF_MATCH,
  errors,
  inWorld,
  NAME,
  notProvisioned,
  provisioned,
  ReadHeaders,
  readErrors,
  WriteHeaders,
} from './http.js';
import { bodyOf, type Body as DefinitionBody, type Kind, recordChange } from './merges/history.js';
import { announceRules } from './rules/announce.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** How many definitions of each kind one world may have (MAX_DEFINITIONS_PER_WORLD). */
    definitionQuota: number;
  }
}

/** The world's definitions of the kind as a write finds them, and the one it is about. */
export interface Found<D> {
  world: string;
  name: string;
  all: D[];
  existing: D | undefined;
}

/** What a PUT's `save` is given besides: the new version and the schema to check it against. */
export interface Put<D, Input> extends Found<D> {
  input: Input;
  version: number;
  document: SchemaDocument;
  /** The new version's bookkeeping as it is saved: valid, without errors, checked at this schema. */
  next: Pick<Definition, 'worldId' | 'name' | 'version' | 'errors' | 'schemaVersion'> & { state: 'valid' };
}

/** The progress of a definition's evaluation over existing objects, as PUT and GET show it. */
export const RecomputeView = Type.Object({
  pending: Type.Boolean(),
  processed: Type.Integer(),
  requestedAt: Type.String(),
  finishedAt: Type.Union([Type.String(), Type.Null()]),
});

/** The bookkeeping fields of a definition's view, as every kind shows them (see Definition). */
export const DefinitionBookkeeping = {
  version: Type.Integer(),
  state: Type.Union([Type.Literal('valid'), Type.Literal('invalid')]),
  errors: Type.Array(Type.Object({ path: Type.String(), message: Type.String() })),
  schemaVersion: Type.Integer(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
};

export interface DefinitionResource<D extends Definition, Body extends TObject, Input, Query extends TProperties> {
  /** The kind, as the definition history and merges name it (docs/adr/0039). */
  kind: Kind;
  /** The path segment after the world, e.g. `rules`. */
  path: string;
  /** How messages and the name parameter call one, e.g. `derived property`. */
  what: string;
  tag: string;
  View: TSchema;
  view: (def: D, progress?: RecomputeProgress | null) => unknown;
  table: {
    list: (db: pg.Pool | pg.PoolClient, world: string) => Promise<D[]>;
    get: (db: pg.Pool | pg.PoolClient, world: string, name: string) => Promise<D | undefined>;
    /** The definitions at a definition position, from the history (`?at=`, docs/adr/0069). */
    listAt: (db: pg.Pool, world: string, position: number) => Promise<D[]>;
    getAt: (db: pg.Pool, world: string, position: number, name: string) => Promise<D | undefined>;
  };
  /**
   * For kinds evaluated over every existing object: a PUT requests that (and wakes the worker),
   * PUT and GET show its progress, a DELETE ends it.
   */
  recompute?: { kind: 'derived' | 'rule'; of: (def: D) => { objectType: string; dueInMs: number } };
  put: {
    summary: string;
    description: string;
    body: Body;
    input: (body: Static<Body>) => Input;
    /** What the stored definition says, as a PUT body with its defaults filled in (the history's body). */
    stored: (def: D) => Record<string, unknown>;
    /** A valid definition that a PUT would not change: it answers 200 and writes nothing. */
    same: (def: D, input: Input) => boolean;
    /** Checks the new version (422, 409) and stores it; runs in the world's transaction. */
    save: (tx: pg.PoolClient, put: Put<D, Input>) => Promise<D>;
  };
  get: { summary: string };
  list: {
    summary: string;
    /** The response's one property, e.g. `rules`. */
    key: string;
    /** The query parameters; no others are accepted. */
    query: Query;
    filter: (query: Static<TObject<Query>>) => (def: D) => boolean;
  };
  delete: {
    summary: string;
    description?: string;
    /** Checks that nothing needs the definition (409) and removes it; runs in the world's transaction. */
    remove: (tx: pg.PoolClient, found: Found<D> & { existing: D }) => Promise<void>;
    /** After the delete committed. */
    afterCommit?: (world: string, name: string) => void;
  };
}

/**
 * A kind's PUT and DELETE as the routes make them, in a caller's transaction that holds the
 * world's lock: a merge applies its definitions through these (docs/adr/0039), so a merged
 * definition is checked, versioned, recorded in the history and recomputed like any other.
 */
export interface DefinitionWriter {
  kind: Kind;
  what: string;
  /** The faults of a body against the PUT's schema (none: it fits). */
  check: (body: unknown) => FieldError[];
  /** The stored definition's version (undefined: none). */
  version: (tx: pg.PoolClient, world: string, name: string) => Promise<number | undefined>;
  /**
   * PUT of a body that passed `check`; answers the version stored. `document`: the schema to
   * check it against instead of the replica's (a merge's schema, which the replica may not have yet).
   */
  put: (
    tx: pg.PoolClient,
    world: string,
    name: string,
    body: DefinitionBody,
    opts?: { expected?: number | 'any'; document?: SchemaDocument },
  ) => Promise<number>;
  remove: (tx: pg.PoolClient, world: string, name: string, expected?: number | 'any') => Promise<number>;
  /** What the route does once its transaction committed (wake the recompute worker, forget metrics). */
  committed: (world: string, name: string, deleted: boolean) => void;
}

/** Registers the four routes of one kind of definition on `fastify`; answers its writer. */
export function definitionResource<D extends Definition, Body extends TObject, Input, Query extends TProperties>(
  fastify: FastifyInstance,
  engine: Engine,
  r: DefinitionResource<D, Body, Input, Query>,
): DefinitionWriter {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const url = `/v1/worlds/:world/${r.path}/:name`;
  const Params = Type.Object({
    world: Type.String({ pattern: WORLD_ID }),
    name: Type.String({ pattern: NAME, description: `the ${r.what}, unique in the world` }),
  });
  const show = async (world: string, def: D) =>
    r.recompute ? r.view(def, await recomputeOf(app.pg, world, r.recompute.kind, def.name)) : r.view(def);
  /** A PUT in the caller's transaction (the world's lock held): 200 or 201 and the definition stored. */
  const write = async (
    tx: pg.PoolClient,
    world: string,
    name: string,
    input: Input,
    expected: number | 'any' | undefined,
    against?: SchemaDocument,
  ): Promise<{ status: 200 | 201; def: D; before: number | null }> => {
    const all = await r.table.list(tx, world);
    const existing = all.find((d) => d.name === name);
    checkIfMatch(expected, existing?.version, `${r.what} ${name}`);
    if (!existing && all.length >= app.definitionQuota) {
      throw new Unprocessable(`world ${world} already has ${all.length} ${r.path}, the most allowed`, [
        { path: '/', message: `a world may have at most ${app.definitionQuota} (MAX_DEFINITIONS_PER_WORLD)` },
      ]);
    }
    if (existing?.state === 'valid' && r.put.same(existing, input)) {
      return { status: 200, def: existing, before: existing.version };
    }
    const replica = await app.schemaReplica.current(tx, world);
    const { version: schemaVersion } = replica;
    const document = against ?? replica.document;
    const version = (existing?.version ?? 0) + 1;
    const next = { worldId: world, name, version, state: 'valid' as const, errors: [], schemaVersion };
    const def = await r.put.save(tx, { world, name, all, existing, input, version, document, next });
    if (r.recompute) {
      const { kind, of } = r.recompute;
      await requestRecompute(tx, { worldId: world, kind, name, definitionVersion: def.version, ...of(def) });
    }
    await recordChange(tx, world, r.kind, name, def.version, bodyOf(r.put.stored(def)));
    if (r.kind === 'rule' && !existing) await announceRules(tx, app.topicPrefix, world);
    await bumpRevision(tx, world);
    return { status: existing ? 200 : 201, def, before: existing?.version ?? null };
  };
  /** A DELETE in the caller's transaction (the world's lock held). */
  const remove = async (tx: pg.PoolClient, world: string, name: string, expected: number | 'any' | undefined) => {
    const all = await r.table.list(tx, world);
    const existing = all.find((d) => d.name === name);
    if (!existing) throw new NotFound(`${r.what} ${name} is not defined in ${world}`);
    checkIfMatch(expected, existing.version, `${r.what} ${name}`);
    await r.delete.remove(tx, { world, name, all, existing });
    if (r.recompute) await finishRecomputes(tx, world, r.recompute.kind, name);
    await recordChange(tx, world, r.kind, name, existing.version, null);
    if (r.kind === 'rule') await announceRules(tx, app.topicPrefix, world);
    await bumpRevision(tx, world);
    return existing.version;
  };
  const committed = (world: string, name: string, deleted: boolean) => {
    if (deleted) r.delete.afterCommit?.(world, name);
    else if (r.recompute) engine.worker.wake();
  };
  const options = <S extends FastifySchema>(role: 'viewer' | 'editor', schema: S) => ({
    bodyLimit: BODY_LIMITS.definition,
    preHandler: app.authorize({ role }),
    schema: { tags: [r.tag], ...schema },
  });

  app.put(
    url,
    options('editor', {
      summary: r.put.summary,
      description: r.put.description,
      params: Params,
      headers: WriteHeaders,
      body: r.put.body,
      response: { 200: r.View, 201: r.View, ...errors },
    }),
    async (request, reply) => {
      const { world, name } = request.params;
      const expected = ifMatch(request, DEFINITION_IF_MATCH);
      await app.awaitConsistency(request, world);
      const result = await inWorld(app.pg, world, async (tx) => {
        const done = await write(tx, world, name, r.put.input(request.body as Static<Body>), expected);
        const changed = done.status === 201 || done.before !== done.def.version;
        await recordAudit(tx, request, {
          action: `${r.kind}.put`,
          result: done.status === 201 ? 'created' : changed ? 'updated' : 'unchanged',
          worldId: world,
          subject: name,
          beforeVersion: done.status === 201 ? null : done.before,
          afterVersion: done.def.version,
        });
        return done;
      });
      committed(world, name, false);
      await app.consistencyHeader(reply, world);
      reply.code(result.status).header('etag', `"${result.def.version}"`);
      if (result.status === 201) reply.header('location', `/v1/worlds/${world}/${r.path}/${name}`);
      return show(world, result.def);
    },
  );

  app.get(
    url,
    options('viewer', {
      summary: r.get.summary,
      params: Params,
      headers: ReadHeaders,
      querystring: Type.Object({ at: Type.Optional(AtState) }, { additionalProperties: false }),
      response: { 200: r.View, ...readErrors },
    }),
    async (request, reply) => {
      const { world, name } = request.params;
      const waited = await app.awaitConsistency(request, world);
      const point = await app.readPoint(world, request.query.at);
      const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: point !== undefined });
      const def = point ? await r.table.getAt(db, world, point.definitions, name) : await r.table.get(db, world, name);
      if (!def) {
        if (!(await provisioned(db, world))) throw notProvisioned(world);
        throw new NotFound(`${r.what} ${name} is not defined in ${world}`);
      }
      reply.header('etag', `"${def.version}"`);
      await app.consistencyHeader(reply, world, watermark);
      // At a ref: the definition as it was, without the progress of a recompute now.
      return point ? r.view(def, r.recompute ? null : undefined) : show(world, def);
    },
  );

  app.get(
    `/v1/worlds/:world/${r.path}`,
    options('viewer', {
      summary: r.list.summary,
      params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
      headers: ReadHeaders,
      querystring: Type.Object({ ...r.list.query, at: Type.Optional(AtState) }, { additionalProperties: false }),
      response: { 200: Type.Object({ [r.list.key]: Type.Array(r.View) }), ...readErrors },
    }),
    async (request, reply) => {
      const { world } = request.params;
      const waited = await app.awaitConsistency(request, world);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const point = await app.readPoint(world, (request.query as { at?: string }).at);
      const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: point !== undefined });
      const all = point ? await r.table.listAt(db, world, point.definitions) : await r.table.list(db, world);
      await app.consistencyHeader(reply, world, watermark);
      const wanted = r.list.filter(request.query as Static<TObject<Query>>);
      return { [r.list.key]: all.filter(wanted).map((d) => r.view(d)) };
    },
  );

  app.delete(
    url,
    options('editor', {
      summary: r.delete.summary,
      ...(r.delete.description === undefined ? {} : { description: r.delete.description }),
      params: Params,
      headers: WriteHeaders,
      response: { 204: Type.Null(), ...errors },
    }),
    async (request, reply) => {
      const { world, name } = request.params;
      const expected = ifMatch(request, DEFINITION_IF_MATCH);
      await inWorld(app.pg, world, async (tx) => {
        const before = await remove(tx, world, name, expected);
        await recordAudit(tx, request, {
          action: `${r.kind}.delete`,
          result: 'deleted',
          worldId: world,
          subject: name,
          beforeVersion: before,
        });
      });
      committed(world, name, true);
      await app.consistencyHeader(reply, world);
      reply.code(204);
      return null;
    },
  );

  return {
    kind: r.kind,
    what: r.what,
    check: (body) => [...Value.Errors(r.put.body, body)].map((e) => ({ path: e.path || '/', message: e.message })),
    version: async (tx, world, name) => (await r.table.get(tx, world, name))?.version,
    put: async (tx, world, name, body, opts = {}) =>
      (await write(tx, world, name, r.put.input(body as Static<Body>), opts.expected, opts.document)).def.version,
    remove,
    committed,
  } satisfies DefinitionWriter;
}

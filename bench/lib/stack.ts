import { migrations as controlMigrations } from '@onto/control/app';
import { migrations as dataMigrations } from '@onto/data/app';
import { migrations as intelligenceMigrations } from '@onto/intelligence/app';
import { createTestDatabase, createTestTopics, testEndpoints, testIdentityEnv } from '@onto/shared/testing';
import { until } from './harness.js';
import { startService } from './services.js';

/** The object type the data benchmarks write: a key, a name, an indexed amount, a status. */
export const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string' },
    amount: { type: 'integer', indexed: true },
    status: { type: { type: 'enum', values: ['open', 'closed'] } },
  },
};

const BOOTSTRAP = 'bench-bootstrap-token-0123456789abcdef';

// biome-ignore lint/suspicious/noExplicitAny: the answers are read field by field, checked by their use
export type Json = any;

/** A JSON call; throws on a status ≥ 300 unless `allow` lists it. */
export async function call(
  base: string,
  method: string,
  path: string,
  token?: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Json> {
  const res = await fetch(base + path, {
    method,
    headers: {
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const json = await res.json().catch(() => null);
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/**
 * control and data (and intelligence when asked) as processes from their compiled servers, on
 * fresh databases and a topic prefix of their own, with the bootstrap administrator's token.
 */
export async function benchStack(
  opts: {
    intelligence?: boolean;
    partitions?: number;
    dataEnv?: Record<string, string>;
    /** A checkout whose build of data runs instead of this one's (a before/after). */
    dataFrom?: string;
    intelligenceEnv?: Record<string, string>;
  } = {},
) {
  const endpoints = testEndpoints();
  const topics = await createTestTopics(endpoints.kafkaBrokers, opts.partitions ?? 6);
  const dbs = await Promise.all([
    createTestDatabase(endpoints.postgresUrl, controlMigrations),
    createTestDatabase(endpoints.postgresUrl, dataMigrations),
    ...(opts.intelligence ? [createTestDatabase(endpoints.postgresUrl, intelligenceMigrations)] : []),
  ]);
  const [controlDb, dataDb, intelligenceDb] = dbs;
  if (!controlDb || !dataDb) throw new Error('no databases');
  const common = {
    REDIS_URL: endpoints.redisUrl,
    KAFKA_BROKERS: endpoints.kafkaBrokers,
    ONTO_TOPIC_PREFIX: topics.prefix,
    // Both halves of the identity key (ADR 35): each service reads its own.
    ...testIdentityEnv(),
  };
  const started: { stop: () => Promise<void> }[] = [];
  const stopAll = async () => {
    for (const s of started.splice(0).reverse()) await s.stop();
  };
  try {
    const control = await startService('control', {
      ...common,
      DATABASE_URL: controlDb.url,
      ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
      // Without intelligence, nothing else provisions worlds: keep them writable all run long.
      ...(opts.intelligence ? {} : { WORLD_PROVISION_TIMEOUT_MS: '3600000' }),
    });
    started.push(control);
    const data = await startService('data', { ...common, DATABASE_URL: dataDb.url, ...opts.dataEnv }, opts.dataFrom);
    started.push(data);
    const intelligence = intelligenceDb
      ? await startService('intelligence', { ...common, DATABASE_URL: intelligenceDb.url, ...opts.intelligenceEnv })
      : undefined;
    if (intelligence) started.push(intelligence);
    const { accessToken: token } = (await call(control.url, 'POST', '/v1/auth/token', undefined, {
      apiToken: BOOTSTRAP,
    })) as { accessToken: string };

    return {
      control,
      data,
      intelligence,
      controlDb,
      dataDb,
      intelligenceDb,
      token,
      topics,
      /**
       * Creates `world` with these types; returns once data (and intelligence) applied the schema.
       */
      async world(
        id: string,
        types: { objectTypes?: Record<string, unknown>; linkTypes?: Record<string, unknown> },
      ): Promise<number> {
        await call(control.url, 'POST', '/v1/worlds', token, { id });
        let version = 0;
        for (const [kind, map] of [
          ['object-types', types.objectTypes ?? {}],
          ['link-types', types.linkTypes ?? {}],
        ] as const) {
          for (const [name, body] of Object.entries(map)) {
            version = (await call(control.url, 'PUT', `/v1/worlds/${id}/${kind}/${name}`, token, body)).version;
          }
        }
        const ready = async (base: string, path: string, field: string) => {
          const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${token}` } });
          return res.ok && (((await res.json()) as Record<string, number>)[field] ?? 0) >= version;
        };
        await until(
          `data at schema version ${version}`,
          () => ready(data.url, `/v1/worlds/${id}/schema-version`, 'version'),
          60_000,
        );
        if (intelligence) {
          await until(
            `intelligence at schema version ${version}`,
            () => ready(intelligence.url, `/v1/worlds/${id}/watermarks`, 'schemaVersion'),
            60_000,
          );
        }
        return version;
      },
      /** Stops the services (their connections go first, e.g. before pgbench needs the slots). */
      stopServices: stopAll,
      async close() {
        await stopAll();
        await Promise.all(dbs.map((db) => db.drop()));
        await topics.drop();
      },
    };
  } catch (error) {
    await stopAll();
    await Promise.all(dbs.map((db) => db.drop()));
    await topics.drop();
    throw error;
  }
}

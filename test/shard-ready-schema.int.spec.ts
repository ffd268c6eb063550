import { createTestDatabase, type TestDatabase, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

// Issue 33, docs/adr/0054 and 0074: data's and intelligence's tables are to become co-located Citus
// distributed tables, routed by world. Citus requires the distribution column in the primary key
// and in every unique index: `world_id` leads them (the fork tree's key, which keeps a tree on one
// shard, is appended to them at distribution, ADR 74), which also keeps a world's rows together on
// one node's index pages. This reads the migrated catalogue and fails on:
// - a table that is not classified below (a new table must say whether rows belong to a world);
// - a world table whose primary key or a unique index does not lead with `world_id`, unless it is
//   one of the PENDING ones, which name what their migration must change (a ratchet: the list may
//   only shrink, and an entry that no longer breaks the rule fails too, so it is taken out).

/** Tables whose rows belong to no world: they stay local (one per node) or become reference tables. */
const NOT_PER_WORLD: Record<string, string> = {
  // the messaging kernel: each node keeps its own outbox, inbox and relay state
  outbox: 'kernel: local to a node (its relay publishes its own rows)',
  outbox_pending: 'kernel',
  outbox_sent: 'kernel',
  outbox_set_aside: 'kernel',
  inbox: 'kernel: keyed by consumer and event id',
  inbox_deferred: 'kernel',
  kernel_meta: 'kernel',
  jobs: "kernel: the job runner's queue (docs/adr/0051), a node's own background work",
  onto_kernel_migrations: 'migrations',
  onto_identity_replica_migrations: 'migrations',
  data_migrations: 'migrations',
  intelligence_migrations: 'migrations',
  // the identity replica (ADR 6): the same rows everywhere, a reference table
  identity_keys: 'reference',
  identity_replica: 'reference',
  identity_revocations: 'reference',
  identity_user_generations: 'reference',
  audit_log_global: 'reference: audit entries of no world (an operator acting on the outbox); docs/adr/0074',
  // data
  storage_indexes: 'reference: indexes of the storage schema, one set for every world',
  worlds: 'reference: the fork tree; read to route a world to its shard (docs/adr/0054)',
  replica_cut: "local: the newest commit cut of the node's data_seq for its read replicas (docs/adr/0083)",
};

/**
 * World tables that break the rule today, with the change their migration must make. Citus could
 * not distribute them as they are.
 */
const PENDING: Record<string, string> = {};

/**
 * Tables whose rows belong to a world although they have no world_id column (a parent's key stands
 * in). None since docs/adr/0074: a row that would be routed by its parent's key cannot be routed.
 */
const WORLD_BY_PARENT = new Set<string>([]);

interface KeyRow {
  table: string;
  index: string;
  primary: boolean;
  first: string;
  definition: string;
}

const SHARDED = SERVICES.filter((s) => s.name !== 'control');

describe('a schema ready to shard by world', () => {
  const endpoints = testEndpoints();
  const dbs = new Map<string, TestDatabase>();
  beforeAll(async () => {
    for (const s of SHARDED) dbs.set(s.name, await createTestDatabase(endpoints.postgresUrl, s.migrations));
  });
  afterAll(async () => {
    for (const db of dbs.values()) await db.drop();
  });

  async function catalogue(service: string) {
    const client = new pg.Client({ connectionString: dbs.get(service)?.url });
    await client.connect();
    try {
      const tables = await client.query<{ table: string; has_world: boolean }>(
        `SELECT c.relname AS table,
                EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'world_id' AND NOT a.attisdropped) AS has_world
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition`,
      );
      const keys = await client.query<KeyRow>(
        `SELECT c.relname AS table, i.relname AS index, x.indisprimary AS primary,
                coalesce((SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = x.indkey[0]), '(expression)') AS first,
                pg_get_indexdef(x.indexrelid) AS definition
           FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND (x.indisprimary OR x.indisunique) AND NOT c.relispartition`,
      );
      return { tables: tables.rows, keys: keys.rows };
    } finally {
      await client.end();
    }
  }

  it.each(SHARDED.map((s) => s.name))(
    '%s: every world table leads its primary key and unique indexes with world_id',
    async (service) => {
      const { tables, keys } = await catalogue(service);
      const problems = new Map<string, string[]>();
      const unclassified: string[] = [];
      for (const { table, has_world } of tables) {
        const name = `${service}.${table}`;
        if (table in NOT_PER_WORLD) {
          if (has_world) unclassified.push(`${name} has world_id but is listed as not per world`);
          continue;
        }
        if (!has_world && !WORLD_BY_PARENT.has(name)) {
          unclassified.push(`${name}: no world_id and not classified (add it to NOT_PER_WORLD or give it world_id)`);
          continue;
        }
        const own = keys.filter((k) => k.table === table);
        const broken: string[] = [];
        if (!own.some((k) => k.primary)) broken.push('no primary key');
        for (const k of own) if (k.first !== 'world_id') broken.push(k.definition);
        if (broken.length > 0) problems.set(name, broken);
      }
      expect(unclassified).toEqual([]);
      const newlyBroken = [...problems]
        .filter(([name]) => !(name in PENDING))
        .map(([name, b]) => `${name}: ${b.join('; ')}`);
      expect(newlyBroken, 'world tables whose keys do not lead with world_id').toEqual([]);
      const fixed = Object.keys(PENDING).filter((name) => name.startsWith(`${service}.`) && !problems.has(name));
      expect(fixed, 'PENDING entries that now keep the rule: take them out').toEqual([]);
    },
  );
});

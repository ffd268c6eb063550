import { dlqOf, physicalTopic, uuidv7 } from '@onto/shared';
import { buildTestService, type TestService, testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from '../../data/test/stack.js';
import * as intelligence from '../../intelligence/src/app.js';
import { ConfigSchema as IntelligenceConfig } from '../../intelligence/src/config.js';
import type { ConsistencyChecker } from '../src/checker/checker.js';

/**
 * The consistency checker (docs/adr/0032) on the real stack: drift injected on purpose into one
 * service's database is found by a check run on demand and repaired through events, after which
 * the next check finds nothing.
 */

const W = 'checked';
const ANNOUNCE = { POSITION_ANNOUNCE_MS: '200' };
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer', required: true } },
};
const Customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const placedBy = { from: 'Order', to: 'Customer', cardinality: 'MANY_TO_MANY' };

describe('the consistency checker', () => {
  let s: Stack;
  let schemaVersion = 0;
  /** intelligence started again on its database after the last test stopped it. */
  let resumed: TestService<unknown> | undefined;

  const intel = () => {
    if (!s.intelligence) throw new Error('no intelligence');
    return s.intelligence.app.pg;
  };
  const checker = () => (s.control.app as unknown as { checker: ConsistencyChecker }).checker;
  /** A check once intelligence has applied everything data wrote (counts compare exactly then). */
  const checkWhenQuiet = async () => {
    await s.until(
      'intelligence caught up with data',
      async () =>
        (await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json().dataBehind === 0 ? true : undefined,
      30_000,
    );
    const findings = await checker().runCheck();
    expect(findings).not.toBeNull();
    return findings ?? [];
  };
  const metrics = async () => (await s.control.app.inject({ method: 'GET', url: '/metrics' })).body;
  const derived = async (pk: string) =>
    (
      await intel().query<{ value: unknown; sourceVersion: string }>(
        `SELECT value, source_version::text AS "sourceVersion" FROM derived_values
          WHERE world_id = $1 AND object_type = 'Order' AND pk = $2 AND name = 'doubled'`,
        [W, pk],
      )
    ).rows[0];

  beforeAll(async () => {
    s = await dataStack({
      intelligence: true,
      controlEnv: { CHECKER_INTERVAL_MS: '0', CHECKER_REPORT_TIMEOUT_MS: '30000' },
      dataEnv: ANNOUNCE,
      intelligenceEnv: ANNOUNCE,
    });
    await s.identityKnown();
    schemaVersion = await s.world(W, { objectTypes: { Order, Customer }, linkTypes: { placedBy } });
    const def = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/doubled`, {
      body: { objectType: 'Order', expression: 'amount * 2', maxStalenessMs: 1000 },
    });
    expect(def.statusCode, def.body).toBeLessThan(300);
    for (const [id, amount] of [
      ['o1', 1],
      ['o2', 2],
      ['o3', 3],
    ] as const) {
      const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/${id}`, {
        body: { properties: { id, amount } },
      });
      expect(res.statusCode, res.body).toBe(201);
    }
    const customer = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/c1`, {
      body: { properties: { id: 'c1' } },
    });
    expect(customer.statusCode, customer.body).toBe(201);
    for (const id of ['o1', 'o2']) {
      const link = await s.dataCall('PUT', `/v1/worlds/${W}/links/placedBy/${id}/c1`);
      expect(link.statusCode, link.body).toBe(201);
    }
    await s.until('the derived values of the three orders', async () => {
      const values = await Promise.all(['o1', 'o2', 'o3'].map(derived));
      return values.every((v) => v?.sourceVersion === '1') ? true : undefined;
    });
  }, 180_000);

  afterAll(async () => {
    await resumed?.close();
    await s?.close();
  });

  it('finds nothing in a consistent world', async () => {
    expect(await checkWhenQuiet()).toEqual([]);
    expect((await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json().findings).toEqual([]);
  }, 60_000);

  it('finds an object intelligence lost and has data re-announce the type', async () => {
    await intel().query(`DELETE FROM rm_objects WHERE world_id = $1 AND type = 'Order' AND pk = 'o2'`, [W]);
    const findings = await checkWhenQuiet();
    expect(findings).toEqual([
      {
        world: W,
        kind: 'count_mismatch',
        subject: 'Order',
        detail: { data: 3, intelligence: 2, quiet: true },
        repair: 'objects.recount.requested',
      },
    ]);
    const vector = (await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json();
    expect(vector.findings).toMatchObject([
      { kind: 'count_mismatch', subject: 'Order', repair: 'objects.recount.requested' },
    ]);
    const text = await metrics();
    expect(text).toMatch(new RegExp(`^onto_checker_findings\\{world="${W}",kind="count_mismatch"[^}]*\\} 1$`, 'm'));
    expect(text).toMatch(/^onto_checker_repairs_total\{kind="count_mismatch"[^}]*\} 1$/m);

    await s.until('o2 back in the read model', async () => {
      const { rowCount } = await intel().query(
        `SELECT 1 FROM rm_objects WHERE world_id = $1 AND type = 'Order' AND pk = 'o2' AND version = 1`,
        [W],
      );
      return rowCount ? true : undefined;
    });
    expect(await checkWhenQuiet()).toEqual([]);
    expect((await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json().findings).toEqual([]);
    expect(await metrics()).not.toContain(`onto_checker_findings{world="${W}"`);
  }, 90_000);

  it('holds back no write for a cause a client names, and repairs the same loss made in intelligence’s tables', async () => {
    // Issue 32: a fresh UUIDv7 in X-Caused-By became the event's caused_by; intelligence waited
    // for a cause that never came and dead-lettered the change (CauseMissing).
    const cause = uuidv7();
    const inIntelligence = async () =>
      (
        await intel().query(`SELECT 1 FROM rm_objects WHERE world_id = $1 AND type = 'Customer' AND pk = 'c-claimed'`, [
          W,
        ])
      ).rowCount
        ? true
        : undefined;
    const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/c-claimed`, {
      body: { properties: { id: 'c-claimed' } },
      headers: { 'x-caused-by': cause },
    });
    expect(res.statusCode, res.body).toBe(201);
    const { rows } = await s.data.app.pg.query<{ event_id: string; body: string; headers: Record<string, string> }>(
      'SELECT event_id::text, body, headers FROM outbox_events WHERE partition_key = $1',
      [`${W}/Customer/c-claimed`],
    );
    expect(rows).toHaveLength(1);
    expect(JSON.parse(rows[0]?.body ?? '{}').caused_by).toBeNull();
    expect(rows[0]?.headers).toMatchObject({ 'x-caused-by': cause });
    // Within the usual latency: before the fix it stayed away for minutes (parked, then dead-lettered).
    await s.until('c-claimed in intelligence', inIntelligence, 10_000);
    const held = await intel().query(
      `SELECT 1 FROM inbox_deferred WHERE caused_by = $1
       UNION ALL SELECT 1 FROM inbox WHERE event_id = $2 AND outcome <> 'applied'`,
      [cause, rows[0]?.event_id],
    );
    expect(held.rowCount).toBe(0);

    // The same divergence, made directly in intelligence's tables: the checker finds and repairs it.
    await intel().query(`DELETE FROM rm_objects WHERE world_id = $1 AND type = 'Customer' AND pk = 'c-claimed'`, [W]);
    expect(await checkWhenQuiet()).toEqual([
      {
        world: W,
        kind: 'count_mismatch',
        subject: 'Customer',
        detail: { data: 2, intelligence: 1, quiet: true },
        repair: 'objects.recount.requested',
      },
    ]);
    await s.until('c-claimed back in intelligence', inIntelligence);
    expect(await checkWhenQuiet()).toEqual([]);
  }, 90_000);

  it('finds a link intelligence lost and has data re-announce the link type', async () => {
    const inReadModel = async () =>
      (
        await intel().query<{ from_pk: string; version: string }>(
          `SELECT from_pk, version::text FROM rm_links
            WHERE world_id = $1 AND link_type = 'placedBy' AND NOT deleted ORDER BY from_pk`,
          [W],
        )
      ).rows;
    await s.until('both links in the read model', async () => ((await inReadModel()).length === 2 ? true : undefined));
    await intel().query(`DELETE FROM rm_links WHERE world_id = $1 AND link_type = 'placedBy' AND from_pk = 'o2'`, [W]);
    expect(await checkWhenQuiet()).toEqual([
      {
        world: W,
        kind: 'link_count_mismatch',
        subject: 'placedBy',
        detail: { data: 2, intelligence: 1, quiet: true },
        repair: 'links.recount.requested',
      },
    ]);
    expect(await metrics()).toMatch(
      new RegExp(`^onto_checker_findings\\{world="${W}",kind="link_count_mismatch"[^}]*\\} 1$`, 'm'),
    );
    expect(await metrics()).toMatch(/^onto_checker_repairs_total\{kind="link_count_mismatch"[^}]*\} 1$/m);
    await s.until('the link back in the read model, at its version', async () => {
      const rows = await inReadModel();
      return rows.length === 2 && rows.every((r) => r.version === '1') ? true : undefined;
    });
    expect(await checkWhenQuiet()).toEqual([]);
  }, 90_000);

  it('finds a derived value older than its maximum staleness and has intelligence recompute it', async () => {
    // A recompute lost: the value was computed from an older version of an object that changed an hour ago.
    await intel().query(
      `UPDATE derived_values SET value = '999', source_version = 0
        WHERE world_id = $1 AND object_type = 'Order' AND pk = 'o1' AND name = 'doubled'`,
      [W],
    );
    await intel().query(
      `UPDATE rm_objects SET updated_at = now() - interval '1 hour' WHERE world_id = $1 AND type = 'Order' AND pk = 'o1'`,
      [W],
    );
    expect(await checkWhenQuiet()).toEqual([
      { world: W, kind: 'derived_stale', subject: 'doubled', detail: {}, repair: 'derived.recompute.requested' },
    ]);
    await s.until('o1 doubled recomputed', async () => {
      const v = await derived('o1');
      return v?.value === 2 && v.sourceVersion === '1' ? true : undefined;
    });
    expect(await checkWhenQuiet()).toEqual([]);
  }, 90_000);

  it("finds a schema version data lost and re-publishes the world's schema", async () => {
    await s.data.app.pg.query('DELETE FROM schema_versions WHERE world_id = $1 AND version = $2', [W, schemaVersion]);
    expect(await checkWhenQuiet()).toEqual([
      {
        world: W,
        kind: 'schema_gap',
        subject: 'data',
        detail: { control: schemaVersion, applied: schemaVersion - 1 },
        repair: 'schema.republished',
      },
    ]);
    await s.until('data applied the re-published schema', async () => {
      const { rowCount } = await s.data.app.pg.query(
        'SELECT 1 FROM schema_versions WHERE world_id = $1 AND version = $2',
        [W, schemaVersion],
      );
      return rowCount ? true : undefined;
    });
    expect(await checkWhenQuiet()).toEqual([]);
    expect(await metrics()).toMatch(/^onto_checker_repairs_total\{kind="schema_gap"[^}]*\} 1$/m);
  }, 90_000);

  it('runs one check at a time: a second one while the first holds the lock is skipped', async () => {
    const [a, b] = await Promise.all([checker().runCheck(), checker().runCheck()]);
    expect([a, b].filter((r) => r === null)).toHaveLength(1);
    expect([a, b].find((r) => r !== null)).toEqual([]);
    // The timer's run is skipped when any replica's check started within the period.
    expect(await checker().runCheck({ unlessRanWithinMs: 60_000 })).toBeNull();
    expect(await checker().runCheck({ unlessRanWithinMs: 0 })).toEqual([]);
  }, 60_000);

  it('while intelligence is stopped: the vector names it, the check finds it unreported; consistent once it resumes', async () => {
    const stopped = s.intelligence;
    if (!stopped) throw new Error('no intelligence');
    await stopped.app.close(); // its consumers stop; its database stays
    const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o4`, {
      body: { properties: { id: 'o4', amount: 4 } },
    });
    expect(res.statusCode, res.body).toBe(201);
    const lagging = await s.until('the vector to name intelligence', async () => {
      const v = (await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json();
      return v.lagging === 'intelligence' && v.dataBehind > 0 ? v : undefined;
    });
    expect(lagging.consistent).toBe(false);
    expect(await checker().runCheck()).toEqual([
      { world: W, kind: 'unreported', subject: 'intelligence', detail: {}, repair: null },
    ]);

    resumed = (await buildTestService(
      { schema: IntelligenceConfig, app: intelligence.default, migrations: intelligence.migrations } as never,
      stopped.env, // its own DATABASE_URL: the same database, the same consumer groups
    )) as TestService<unknown>;
    await s.until(
      'the vector consistent again',
      async () => ((await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json().consistent ? true : undefined),
      60_000,
    );
    const resumedPool = (resumed.app as unknown as { pg: typeof stopped.app.pg }).pg;
    await s.until('o4 in the read model', async () => {
      const { rowCount } = await resumedPool.query(`SELECT 1 FROM rm_objects WHERE world_id = $1 AND pk = 'o4'`, [W]);
      return rowCount ? true : undefined;
    });
    expect(await checkWhenQuiet()).toEqual([]);
  }, 150_000);

  it('finds records waiting in a dead-letter topic, and repairs nothing there', async () => {
    const dlq = physicalTopic(s.prefix, dlqOf('onto.storage'));
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    try {
      await producer.send([{ topic: dlq, messages: [{ key: W, value: 'a dead letter' }] }]);
    } finally {
      await producer.disconnect();
    }
    expect(await checkWhenQuiet()).toEqual([
      { world: null, kind: 'dlq_depth', subject: dlq, detail: { depth: 1 }, repair: null },
    ]);
    expect(await metrics()).toMatch(/^onto_checker_findings\{world="",kind="dlq_depth"[^}]*\} 1$/m);
    // Belongs to no world: the world's findings stay empty.
    expect((await s.controlCall('GET', `/v1/worlds/${W}/consistency`)).json().findings).toEqual([]);

    // Another replica's later run found nothing: a replica whose timer skipped exports that run's findings.
    await s.control.app.pg.query(
      `INSERT INTO checker_runs (check_id, started_at, finished_at) VALUES (gen_random_uuid(), now(), now() + interval '1 second')`,
    );
    await checker().refreshFindingsGauge();
    expect(await metrics()).not.toContain('onto_checker_findings{');
  }, 60_000);
});

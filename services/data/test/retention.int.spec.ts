import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConsistencyChecker } from '../../control/src/checker/checker.js';
import { dataStack, expectProblem, type Stack } from './stack.js';

/*
 * History retention (issue 34, docs/adr/0072) on the real stack (control, data, intelligence,
 * PostgreSQL, Kafka). A world W with a tag, two child worlds forked at different commits (one with
 * a child of its own), an open merge between two other children (its base is in W), an applied
 * merge into W and a live page token; its history is made old by moving its timestamps back ten
 * days, then a policy of one day (and two versions) is set. The pruner, as a recurring job, must
 * remove exactly the rows this test computes no kept ref reads, every read at a kept ref must
 * answer what it answered before, reads before the horizon 410, and merge-verify and the
 * consistency checker must agree afterwards.
 */

const W = 'ret';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer' },
    load: { type: { type: 'series', value: 'double' } },
  },
};
const Customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const placed = { from: 'Customer', to: 'Order', cardinality: 'MANY_TO_MANY' };
const DAY_MS = 86_400_000;

type HistoryRow = { table: string; key: string; seq: number; superseded: number | null; rank: number };
type DefinitionRow = { key: string; seq: number; next: number | null; dataSeq: number };

describe('history retention', () => {
  let s: Stack;
  const checker = () => (s.control.app as unknown as { checker: ConsistencyChecker }).checker;

  beforeAll(async () => {
    s = await dataStack({
      intelligence: true,
      dataEnv: {
        RETENTION_PRUNE_INTERVAL_MS: '1000',
        RETENTION_PRUNE_BATCH: '7',
        RETENTION_PRUNE_GRACE_MS: '200',
        QUERY_TOKEN_TTL_SECONDS: '3600',
      },
      intelligenceEnv: { RETENTION_PRUNE_BATCH: '5', RETENTION_PRUNE_GRACE_MS: '200' },
      controlEnv: { RETENTION_MIN_DAYS: '1', CHECKER_INTERVAL_MS: '0' },
    });
  }, 120_000);
  afterAll(async () => s?.close());

  const ok = async (what: string, res: Promise<LightMyRequestResponse>) => {
    const r = await res;
    expect(r.statusCode, `${what}: ${r.body}`).toBeLessThan(300);
    return r;
  };
  const commitOf = (res: { headers: Record<string, unknown> }) =>
    Number(String(res.headers['x-consistency-token']).replace('data=', ''));
  const put = async (world: string, pk: string, amount: number) =>
    commitOf(
      await ok(
        'put',
        s.dataCall('PUT', `/v1/worlds/${world}/objects/Order/${pk}`, { body: { properties: { id: pk, amount } } }),
      ),
    );
  const del = async (world: string, pk: string) =>
    ok('delete', s.dataCall('DELETE', `/v1/worlds/${world}/objects/Order/${pk}`));
  const link = async (world: string, from: string, to: string, method: 'PUT' | 'DELETE') =>
    ok('link', s.dataCall(method, `/v1/worlds/${world}/links/placed/${from}/${to}`));
  const load = async (world: string, pk: string, value: number) =>
    ok(
      'series',
      s.dataCall('POST', `/v1/worlds/${world}/series/Order/${pk}/load`, {
        body: { points: [{ time: new Date(Math.floor(Date.now() / DAY_MS) * DAY_MS).toISOString(), value }] },
      }),
    );
  const head = async () =>
    Number(
      (
        await s.data.app.pg.query<{ h: string }>(
          'SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS h FROM data_seq',
        )
      ).rows[0]?.h,
    );
  const fork = async (id: string, from: string, ref?: number) => {
    await ok(
      'fork',
      s.controlCall('POST', '/v1/worlds', {
        body: { id, from: { world: from, ...(ref !== undefined && { ref: String(ref) }) } },
      }),
    );
    await s.until(
      `world ${id} READY`,
      async () => ((await s.controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined),
      60_000,
    );
    const { rows } = await s.data.app.pg.query<{ base_seq: string }>('SELECT base_seq FROM worlds WHERE id = $1', [id]);
    return Number(rows[0]?.base_seq);
  };
  const mergeSettled = (target: string, id: string, statuses: string[]) =>
    s.until(
      `merge ${id}`,
      async () => {
        const m = (await s.controlCall('GET', `/v1/worlds/${target}/merges/${id}`)).json();
        return statuses.includes(m.status) ? m : undefined;
      },
      60_000,
    );

  /** Every history row of W with the end of its interval and its rank (1: the newest version of its key). */
  async function historyOf(world: string): Promise<HistoryRow[]> {
    const { rows } = await s.data.app.pg.query<{
      table: string;
      key: string;
      seq: string;
      superseded: string | null;
      rank: string;
    }>(
      `SELECT 'objects' AS table, type || '/' || pk AS key, seq::text, superseded_seq::text AS superseded,
              (1 + row_number() OVER (PARTITION BY type, pk ORDER BY seq DESC))::text AS rank
         FROM object_history WHERE world_id = $1
       UNION ALL
       SELECT 'links', link_type || '/' || from_pk || '/' || to_pk, seq::text,
              (lead(seq) OVER (PARTITION BY link_type, from_pk, to_pk ORDER BY seq))::text,
              (row_number() OVER (PARTITION BY link_type, from_pk, to_pk ORDER BY seq DESC))::text
         FROM link_history WHERE world_id = $1
       UNION ALL
       SELECT 'series points', h.series_id || '/' || h.time, h.seq::text, h.superseded_seq::text, '1'
         FROM series_point_history h JOIN series_keys k ON k.id = h.series_id WHERE k.world_id = $1`,
      [world],
    );
    return rows
      .map((r) => ({
        table: r.table,
        key: r.key,
        seq: Number(r.seq),
        superseded: r.superseded === null ? null : Number(r.superseded),
        rank: Number(r.rank),
      }))
      .sort((a, b) => a.table.localeCompare(b.table) || a.key.localeCompare(b.key) || a.seq - b.seq);
  }

  /**
   * intelligence's versioned read-model rows of a world: each with the data commits its interval
   * covers and its rank (2: the newest of its key here, the current version being 1).
   */
  async function intelligenceHistoryOf(world: string): Promise<HistoryRow[]> {
    const { rows } = await intel().query<{
      table: string;
      key: string;
      seq: string;
      superseded: string;
      rank: string;
    }>(
      `SELECT 'objects' AS table, type || '/' || pk AS key, seq::text, superseded_seq::text AS superseded,
              (1 + row_number() OVER (PARTITION BY type, pk ORDER BY superseded_seq DESC))::text AS rank
         FROM rm_objects_history WHERE world_id = $1
       UNION ALL
       SELECT 'links', link_type || '/' || from_pk || '/' || to_pk, seq::text, superseded_seq::text,
              (1 + row_number() OVER (PARTITION BY link_type, from_pk, to_pk ORDER BY superseded_seq DESC))::text
         FROM rm_links_history WHERE world_id = $1
       UNION ALL
       SELECT 'derived values', object_type || '/' || pk || '/' || name, valid_seq::text, superseded_seq::text,
              (1 + row_number() OVER (PARTITION BY object_type, pk, name ORDER BY superseded_seq DESC))::text
         FROM derived_values_history WHERE world_id = $1`,
      [world],
    );
    return rows
      .map((r) => ({
        table: r.table,
        key: r.key,
        seq: Number(r.seq),
        superseded: Number(r.superseded),
        rank: Number(r.rank),
      }))
      .sort((a, b) => a.table.localeCompare(b.table) || a.key.localeCompare(b.key) || a.seq - b.seq);
  }
  async function definitionHistoryOf(world: string): Promise<DefinitionRow[]> {
    const { rows } = await intel().query<{ key: string; seq: string; next: string | null; data_seq: string }>(
      `SELECT kind || '/' || name AS key, seq::text, data_seq::text,
              (lead(seq) OVER (PARTITION BY kind, name ORDER BY seq))::text AS next
         FROM definition_history WHERE world_id = $1 ORDER BY seq`,
      [world],
    );
    return rows.map((r) => ({
      key: r.key,
      seq: Number(r.seq),
      next: r.next === null ? null : Number(r.next),
      dataSeq: Number(r.data_seq),
    }));
  }
  const intel = () => {
    if (!s.intelligence) throw new Error('no intelligence');
    return s.intelligence.app.pg;
  };
  const derived = (expression: string) =>
    ok(
      'derived property',
      s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/scaled`, { body: { objectType: 'Order', expression } }),
    );

  it('prunes exactly what no kept ref reads; kept refs read as before, older ones answer 410', async () => {
    await s.world(W, { objectTypes: { Order, Customer }, linkTypes: { placed } });
    const c1 = await ok(
      'customer',
      s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/c1`, { body: { properties: { id: 'c1' } } }),
    );
    // Intelligence has applied c1 first: the definitions' changes below then stand at a data commit
    // after the world's creation. Made at its creation, they would sit at or below the first
    // horizon (the creation commit, while nothing is older than keepDays), and the pruner could
    // rightly drop the first before this test counts it.
    await s.until('intelligence applied c1', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/objects/Customer/c1`, {
        headers: { 'x-consistency-token': `data=${commitOf(c1)}` },
      });
      return res.statusCode === 200 ? true : undefined;
    });
    // A derived property changed twice before any fork or tag, and once more later: definition history.
    await derived('self.amount * 2');
    await derived('self.amount * 3');
    // A policy that prunes nothing yet: everything is younger than 30 days.
    await ok('policy', s.controlCall('PUT', `/v1/worlds/${W}/retention`, { body: { keepDays: 30 } }));

    // The old history: six orders written four times each, deletions, links made and unmade, a
    // series point overwritten; a tag, forks and merges in between.
    const commits: number[] = [];
    let midTime = 0;
    for (let round = 0; round < 4; round++) {
      for (let i = 1; i <= 6; i++) commits.push(await put(W, `o${i}`, round * 10 + i));
      if (round === 1) midTime = Date.now();
      await link(W, 'c1', `o${round + 1}`, 'PUT');
      if (round > 0) await link(W, 'c1', `o${round}`, 'DELETE');
      // A link made and unmade every round: more versions than keepVersions.
      await link(W, 'c1', 'o6', 'PUT');
      await link(W, 'c1', 'o6', 'DELETE');
      await load(W, 'o1', round);
      if (round === 1) {
        const tag = await ok('tag', s.controlCall('PUT', `/v1/worlds/${W}/tags/t1`, { body: {} }));
        expect(tag.statusCode).toBeLessThan(300);
        await s.until('tag t1 complete', async () =>
          (await s.controlCall('GET', `/v1/worlds/${W}/tags/t1`)).json().status === 'COMPLETE' ? true : undefined,
        );
      }
      if (round === 2) await del(W, 'o6');
    }
    const tagCommit = Number(
      (await s.data.app.pg.query<{ c: string }>(`SELECT commit AS c FROM world_tags WHERE world_id = $1`, [W])).rows[0]
        ?.c,
    );
    // Two children at different commits of the past, and a child of the first.
    const a = await fork('ret-a', W, commits[3] as number);
    const b = await fork('ret-b', W, commits[14] as number);
    expect(a).toBeLessThan(b);
    await put('ret-a', 'o1', 1000);
    await fork('ret-aa', 'ret-a');
    // An applied merge into W: a fork changes o2, merged SOURCE_WINS.
    const g = await fork('ret-g', W);
    const children = [a, b, g];
    await put('ret-g', 'o2', 2000);
    const applied = (
      await ok(
        'merge',
        s.controlCall('POST', `/v1/worlds/${W}/merges`, { body: { source: 'ret-g', strategy: 'SOURCE_WINS' } }),
      )
    ).json() as { id: string };
    expect((await mergeSettled(W, applied.id, ['MERGED', 'FAILED', 'COMPENSATED'])).status).toBe('MERGED');
    // W moves on, then two more children; a MANUAL merge between them stays open on a conflict.
    for (let i = 1; i <= 6; i++) commits.push(await put(W, `o${i}`, 100 + i));
    children.push(await fork('ret-m1', W), await fork('ret-m2', W));
    await put('ret-m1', 'o3', 3001);
    await put('ret-m2', 'o3', 3002);
    const open = (
      await ok(
        'open merge',
        s.controlCall('POST', '/v1/worlds/ret-m1/merges', { body: { source: 'ret-m2', strategy: 'MANUAL' } }),
      )
    ).json() as { id: string };
    await mergeSettled('ret-m1', open.id, ['CONFLICTS']);
    for (let i = 1; i <= 3; i++) commits.push(await put(W, `o${i}`, 200 + i));
    await derived('self.amount * 4');
    // A live page token, read at an old commit.
    const tokenAt = commits[8] as number;
    const query = (pageToken?: string) =>
      s.dataCall('POST', `/v1/worlds/${W}/objects/Order/query`, {
        body: { at: String(tokenAt), pageSize: 2, orderBy: [{ property: 'id' }], ...(pageToken && { pageToken }) },
      });
    const first = (await ok('query', query())).json() as { nextPageToken: string };
    expect(first.nextPageToken).toEqual(expect.any(String));
    // A live page token of intelligence's object sets, at another old commit: intelligence's own.
    const intelTokenAt = commits[4] as number;
    const intelQuery = (pageToken?: string) =>
      s.intelCall('POST', `/v1/worlds/${W}/objects/Order/query`, {
        body: { at: String(intelTokenAt), pageSize: 2, orderBy: [{ property: 'id' }], ...(pageToken && { pageToken }) },
      });
    const intelFirst = (await ok('intelligence query', intelQuery())).json() as { nextPageToken: string };
    expect(intelFirst.nextPageToken).toEqual(expect.any(String));

    // Everything up to now becomes ten days old; then a few recent writes.
    const old = await head();
    const age = (table: string, column: string) =>
      s.data.app.pg.query(
        `UPDATE ${table} SET ${column} = ${column} - interval '10 days' WHERE world_id = $1 AND seq <= $2`,
        [W, old],
      );
    await age('object_heads', 'updated_at');
    await age('object_history', 'written_at');
    await age('link_history', 'written_at');
    await age('series_batches', 'written_at');
    await s.data.app.pg.query(`UPDATE worlds SET provisioned_at = provisioned_at - interval '10 days' WHERE id = $1`, [
      W,
    ]);
    await put(W, 'o1', 301);
    await put(W, 'o4', 304);
    await link(W, 'c1', 'o4', 'DELETE');
    // intelligence has applied every write and finished every recompute.
    const last = await put(W, 'o5', 305);
    await s.until(
      'intelligence caught up',
      async () => {
        const res = await s.intelCall('GET', `/v1/worlds/${W}/objects/Order/o5`, {
          headers: { 'x-consistency-token': `data=${last}` },
        });
        if (res.statusCode !== 200) return undefined;
        const { rows } = await intel().query('SELECT 1 FROM recompute_jobs WHERE finished_at IS NULL LIMIT 1');
        return rows.length === 0 ? true : undefined;
      },
      60_000,
    );

    // What the test expects: the horizon is the newest commit of W written a day ago or earlier.
    const { rows: hz } = await s.data.app.pg.query<{ h: string }>(
      `SELECT greatest(
         (SELECT max(seq) FROM object_heads WHERE world_id = $1 AND updated_at <= now() - interval '1 day'),
         (SELECT max(seq) FROM object_history WHERE world_id = $1 AND written_at <= now() - interval '1 day'),
         (SELECT max(seq) FROM link_history WHERE world_id = $1 AND written_at <= now() - interval '1 day'),
         (SELECT max(seq) FROM series_batches WHERE world_id = $1 AND written_at <= now() - interval '1 day'))::text AS h`,
      [W],
    );
    const horizon = Number(hz[0]?.h);
    expect(horizon).toBeGreaterThan(tokenAt);
    expect(horizon).toBeLessThanOrEqual(old);
    // The kept points below it, as this test made them.
    const { rows: mergeRows } = await s.data.app.pg.query<{
      id: string;
      base_world: string | null;
      base_seq: string | null;
      source: string;
      source_seq: string;
      target: string;
      target_seq: string;
      commit_seq: string | null;
      status: string;
    }>('SELECT id, base_world, base_seq, source, source_seq, target, target_seq, commit_seq, status FROM merges');
    const appliedRow = mergeRows.find((m) => m.id === applied.id);
    const openRow = mergeRows.find((m) => m.id === open.id);
    expect(appliedRow?.status).toBe('applied');
    expect(openRow).toMatchObject({ status: 'planned', base_world: W });
    const kept = new Set<number>([tagCommit, ...children, tokenAt]);
    for (const m of [appliedRow, openRow]) {
      if (!m) continue;
      if (m.base_world === W) kept.add(Number(m.base_seq));
      if (m.target === W) kept.add(Number(m.target_seq));
      if (m.target === W && m.commit_seq !== null) kept.add(Number(m.commit_seq));
    }
    const keepVersions = 2;
    const needed = (r: HistoryRow) =>
      r.superseded === null ||
      r.superseded > horizon ||
      [...kept].some((p) => r.seq <= p && p < (r.superseded as number)) ||
      (r.table !== 'series points' && r.rank <= keepVersions);
    const before = await historyOf(W);
    // intelligence keeps the points data keeps (the tag, the children's fork points, the merges'
    // points, learnt from data's replies), but its own page tokens' commits for data's, and
    // keepVersions alike (docs/adr/0077).
    const intelKept = new Set<number>([...kept].filter((p) => p !== tokenAt));
    intelKept.add(intelTokenAt);
    const holds = (points: Iterable<number>, r: HistoryRow) =>
      [...points].some((p) => r.seq <= p && p < (r.superseded as number));
    const intelNeeded = (r: HistoryRow) =>
      (r.superseded as number) > horizon || holds(intelKept, r) || r.rank <= keepVersions;
    const intelBefore = await intelligenceHistoryOf(W);
    const intelExpected = intelBefore.filter(intelNeeded);
    for (const table of ['objects', 'links', 'derived values']) {
      expect(intelBefore.filter((r) => r.table === table && !intelNeeded(r)).length, table).toBeGreaterThan(0);
    }
    // Rows that only the new rules keep: a merge's point, intelligence's page token, keepVersions.
    const mergePoints = [...kept].filter((p) => p !== tokenAt && p !== tagCommit && !children.includes(p));
    const before077 = (r: HistoryRow) => (r.superseded as number) > horizon || holds([tagCommit, ...children], r);
    const only = (rule: (r: HistoryRow) => boolean) => intelBefore.filter((r) => !before077(r) && rule(r)).length;
    expect(mergePoints.length).toBeGreaterThan(0);
    expect(only((r) => holds([intelTokenAt], r))).toBeGreaterThan(0);
    expect(only((r) => r.rank <= keepVersions)).toBeGreaterThan(0);
    const defsBefore = await definitionHistoryOf(W);
    const defHorizon = Math.max(...defsBefore.filter((d) => d.dataSeq <= horizon).map((d) => d.seq));
    const { rows: defPoints } = await intel().query<{ p: string }>(
      `SELECT definitions AS p FROM world_tags WHERE world_id = $1 AND definitions IS NOT NULL
       UNION SELECT definitions FROM fork_points WHERE base_world = $1
       UNION SELECT base_position FROM definition_merges WHERE base_world = $1 AND status IN ('planned', 'applied')
       UNION SELECT target_position FROM definition_merges WHERE target = $1 AND status IN ('planned', 'applied')
       UNION SELECT applied_position FROM definition_merges WHERE target = $1 AND status = 'applied'`,
      [W],
    );
    const defKept = defPoints.map((r) => Number(r.p));
    const newer = (d: DefinitionRow) => defsBefore.filter((e) => e.key === d.key && e.seq > d.seq).length;
    const defsExpected = defsBefore.filter(
      (d) =>
        d.next === null ||
        d.next > defHorizon ||
        defKept.some((p) => d.seq <= p && p < (d.next as number)) ||
        newer(d) < keepVersions,
    );
    expect(defsExpected.length).toBeLessThan(defsBefore.length);
    const expected = before.filter(needed);
    expect(expected.length).toBeLessThan(before.length);
    expect(before.filter((r) => r.table === 'links' && !needed(r)).length).toBeGreaterThan(0);
    expect(before.filter((r) => r.table === 'series points' && !needed(r)).length).toBeGreaterThan(0);

    // Every read at a kept ref, as it answers now.
    const refs = [String(tagCommit), 't1', String(a), String(b), String(tokenAt), String(horizon), String(old)];
    for (const m of [appliedRow, openRow]) if (m?.target === W) refs.push(m.target_seq, m.commit_seq ?? m.target_seq);
    if (openRow?.base_seq) refs.push(openRow.base_seq);
    const reads = async () => {
      const answers: Record<string, unknown> = {};
      for (const ref of refs) {
        for (let i = 1; i <= 6; i++) {
          const res = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o${i}?at=${ref}`);
          answers[`${ref} o${i}`] = [res.statusCode, res.json().properties ?? null];
        }
        const list = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order?at=${ref}&limit=100`);
        answers[`${ref} list`] = [list.statusCode, list.json().objects];
        const links = await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1/links/placed?at=${ref}`);
        answers[`${ref} links`] = [links.statusCode, links.json()];
      }
      for (const world of ['ret-a', 'ret-b', 'ret-aa', 'ret-m1', 'ret-m2']) {
        const list = await s.dataCall('GET', `/v1/worlds/${world}/objects/Order?limit=100`);
        answers[`${world} list`] = [list.statusCode, list.json().objects];
      }
      return answers;
    };
    const readsBefore = await reads();
    const intelRefs = [
      String(tagCommit),
      't1',
      ...children.map(String),
      ...mergePoints.map(String),
      String(intelTokenAt),
      String(horizon),
      String(old),
    ];
    const intelReads = async () => {
      const answers: Record<string, unknown> = {};
      for (const ref of intelRefs) {
        for (let i = 1; i <= 6; i++) {
          const res = await s.intelCall('GET', `/v1/worlds/${W}/objects/Order/o${i}?at=${ref}`);
          answers[`${ref} o${i}`] = [res.statusCode, res.json()];
        }
      }
      for (const world of ['ret-a', 'ret-b', 'ret-aa', 'ret-m1', 'ret-m2']) {
        for (let i = 1; i <= 6; i++) {
          const res = await s.intelCall('GET', `/v1/worlds/${world}/objects/Order/o${i}`);
          answers[`${world} o${i}`] = [res.statusCode, res.json()];
        }
      }
      return answers;
    };
    const intelReadsBefore = await intelReads();
    const unkept = tagCommit + 1 < horizon && !kept.has(tagCommit + 1) ? tagCommit + 1 : undefined;
    expect(unkept).toBeDefined();
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o1?at=${unkept}`)).statusCode).toBe(200);

    // A bad policy changes nothing; a world in a running merge refuses one.
    const bad = async (body: unknown, status: number, path: string) => {
      const res = await s.controlCall('PUT', `/v1/worlds/${W}/retention`, { body });
      const p = expectProblem(res, status) as { errors?: { path: string }[] };
      expect(JSON.stringify(p.errors)).toContain(path);
    };
    await bad({ keepDays: 0 }, 422, '/keepDays');
    await bad({ keepDays: -1 }, 400, 'keepDays');
    await bad({ keepDays: 36_501 }, 400, 'keepDays');
    await bad({ keepDays: 'x' }, 400, 'keepDays');
    await bad({ keepDays: 2, keepVersions: 0 }, 400, 'keepVersions');
    await bad({ keepVersions: 3 }, 422, '/keepVersions');
    await bad({ keepDays: 2, extra: 1 }, 400, '');
    expectProblem(await s.controlCall('PUT', '/v1/worlds/ret-m1/retention', { body: { keepDays: 5 } }), 409);
    expect((await s.controlCall('GET', `/v1/worlds/${W}/retention`)).json()).toMatchObject({
      keepDays: 30,
      keepVersions: null,
      revision: 1,
    });
    expect(await historyOf(W)).toEqual(before);
    expect(await intelligenceHistoryOf(W)).toEqual(intelBefore);

    // The policy that prunes: one day, two versions.
    const set = await ok(
      'policy',
      s.controlCall('PUT', `/v1/worlds/${W}/retention`, { body: { keepDays: 1, keepVersions } }),
    );
    expect(set.json()).toMatchObject({ world: W, keepDays: 1, keepVersions, revision: 2 });
    const history = await s.until(
      'a pass at the new horizon',
      async () => {
        const { rows } = await s.data.app.pg.query<{
          pass_table: number | null;
          horizon_seq: string;
          revision: number;
        }>('SELECT pass_table, horizon_seq, revision FROM world_retention WHERE world_id = $1', [W]);
        const r = rows[0];
        if (r?.revision !== 2 || Number(r.horizon_seq) !== horizon || r.pass_table !== null) return undefined;
        return (await s.dataCall('GET', `/v1/worlds/${W}/history`)).json() as { keptPoints: number[]; pruned: number };
      },
      60_000,
    );
    expect(history).toMatchObject({ world: W, keepDays: 1, keepVersions, revision: 2, horizon });
    expect(new Set(history.keptPoints)).toEqual(new Set([...kept].filter((p) => p < horizon)));

    // Row by row: exactly the needed rows are left.
    const after = await historyOf(W);
    const strip = (rows: HistoryRow[]) => rows.map(({ table, key, seq }) => `${table} ${key} ${seq}`);
    expect(strip(after)).toEqual(strip(expected));
    expect(history.pruned).toBe(before.length - expected.length);

    // Every read at a kept ref answers as before; the page token goes on.
    expect(await reads()).toEqual(readsBefore);
    const second = await query(first.nextPageToken);
    expect(second.statusCode, second.body).toBe(200);
    expect(second.json().commit).toBe(tokenAt);

    // Before the horizon: 410 naming the ref, with the horizon; so is a fork from there.
    const gone = expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o1?at=${unkept}`), 410) as {
      horizon: number;
      errors: { path: string }[];
    };
    expect(gone.horizon).toBe(horizon);
    expect(gone.errors[0]?.path).toBe('querystring/at');
    // An instant of the past history (as it was aged): before the horizon. One after the newest old
    // write reads the horizon's state, which is kept.
    const instant = new Date(midTime - 10 * DAY_MS).toISOString();
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Order?at=${instant}`), 410);
    const recent = new Date(Date.now() - 5 * DAY_MS).toISOString();
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/Order?at=${recent}&limit=100`)).json().objects).toEqual(
      (readsBefore[`${horizon} list`] as unknown[])[1],
    );
    expectProblem(
      await s.dataCall('POST', `/v1/worlds/${W}/objects/Order/query`, { body: { at: String(unkept) } }),
      410,
    );

    // The metrics.
    const metrics = (await s.data.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toContain(`onto_history_rows{world="${W}",service="data"} ${after.length}`);
    const prunedTotal = [
      ...metrics.matchAll(new RegExp(`^onto_history_pruned_total\\{world="${W}"[^}]*\\} (\\d+)$`, 'gm')),
    ]
      .map((m) => Number(m[1]))
      .reduce((x, y) => x + y, 0);
    expect(prunedTotal).toBe(before.length - expected.length);

    // intelligence prunes at data's horizon (storage.history.horizon), exactly its unneeded rows.
    await s.until(
      "intelligence's pass at the horizon",
      async () => {
        const { rows } = await intel().query<{ h: string; pass_table: number | null }>(
          'SELECT horizon_seq AS h, pass_table FROM world_horizons WHERE world_id = $1',
          [W],
        );
        return rows[0] && Number(rows[0].h) === horizon && rows[0].pass_table === null ? true : undefined;
      },
      60_000,
    );
    const intelAfter = await intelligenceHistoryOf(W);
    expect(strip(intelAfter)).toEqual(strip(intelExpected));
    const defsAfter = await definitionHistoryOf(W);
    expect(defsAfter.map((d) => `${d.key} ${d.seq}`)).toEqual(defsExpected.map((d) => `${d.key} ${d.seq}`));
    expect(await intelReads()).toEqual(intelReadsBefore);
    const intelSecond = await intelQuery(intelFirst.nextPageToken);
    expect(intelSecond.statusCode, intelSecond.body).toBe(200);
    expect(intelSecond.json().commit).toBe(intelTokenAt);
    // control answers the horizon data announced (docs/adr/0077).
    expect(
      (
        await s.until('the horizon in control', async () => {
          const h = (await s.controlCall('GET', `/v1/worlds/${W}`)).json().historyHorizon;
          return h?.commit === horizon ? h : undefined;
        })
      ).commit,
    ).toBe(horizon);
    const intelGone = expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/objects/Order/o1?at=${unkept}`), 410) as {
      horizon: number;
      errors: { path: string }[];
    };
    expect(intelGone).toMatchObject({ horizon, errors: [{ path: 'querystring/at' }] });
    const intelMetrics = (await s.intelligence?.app.inject({ method: 'GET', url: '/metrics' }))?.body ?? '';
    expect(intelMetrics).toContain(
      `onto_history_rows{world="${W}",service="intelligence"} ${intelAfter.length + defsAfter.length}`,
    );

    // merge-verify of the applied merge, and the consistency checker, agree.
    await ok('verify', s.controlCall('POST', `/v1/admin/worlds/${W}/merges/${applied.id}/verify`));
    const verified = await s.until('verified', async () => {
      const res = await s.controlCall('GET', `/v1/admin/worlds/${W}/merges/${applied.id}/verify`);
      return res.statusCode === 200 && res.json().complete ? (res.json() as { differences: number }) : undefined;
    });
    expect(verified.differences, JSON.stringify(verified)).toBe(0);
    const findings = (await checker().runCheck()) ?? [];
    expect(findings.filter((f) => f.world?.startsWith('ret'))).toEqual([]);

    // Another pass at the same horizon prunes nothing more.
    await s.data.app.pg.query("UPDATE world_retention SET horizon_at = now() - interval '1 hour' WHERE world_id = $1", [
      W,
    ]);
    await s.until('another pass', async () => {
      const { rows } = await s.data.app.pg.query<{ at: Date; pass_table: number | null }>(
        'SELECT horizon_at AS at, pass_table FROM world_retention WHERE world_id = $1',
        [W],
      );
      return rows[0] && rows[0].at.getTime() > Date.now() - 60_000 && rows[0].pass_table === null ? true : undefined;
    });
    expect(strip(await historyOf(W))).toEqual(strip(expected));
  }, 240_000);
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * Every ref everywhere (issue 35, docs/adr/0046, 0069): on every read route of data and of
 * intelligence that takes `?at=` — enumerated from the services' own OpenAPI documents, so that a
 * new route without this proof fails here — `?at=<tag>` answers exactly what `?at=<the tag's
 * commit>` answers, and `?at=<instant>` exactly what `?at=<the commit the instant names>` answers:
 * the last commit of the world the test wrote at or before that instant. The same instant answers
 * the same object in data and in intelligence, in a world and in a fork of it.
 */

const W = 'refs';
const Machine = {
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    load: { type: 'integer' },
    temperature: { type: { type: 'series', value: 'double' } },
  },
};
const Site = { displayName: 'Site', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const linkTypes = { hosts: { from: 'Site', to: 'Machine', cardinality: 'ONE_TO_MANY' } };
const mark = {
  parameters: { machine: { type: 'string', required: true } },
  edits: [{ op: 'modifyObject', objectType: 'Machine', pk: { param: 'machine' }, values: { load: { value: 0 } } }],
};

interface Operation {
  parameters?: { name: string; in: string; required?: boolean; schema?: { pattern?: string } }[];
}
type Document = { paths: Record<string, Record<string, Operation>> };

/** Values for the path and required query parameters of the read routes, by name (`name`: by the route). */
const FILL: Record<string, string> = {
  'derived-properties': 'double',
  rules: 'big',
  'decision-definitions': 'review',
  world: W,
  type: 'Machine',
  pk: 'm1',
  linkType: 'hosts',
  link: 'hosts',
  series: 'temperature',
  property: 'temperature',
  from: '2025-01-01T00:00:00Z',
  to: '2027-01-01T00:00:00Z',
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('?at= takes a commit, an instant or a tag on every read of data and intelligence', () => {
  let s: IntelligenceStack;
  const tokens: string[] = [];
  /** The ids `{id}` path parameters take, by the route's collection (`alerts`). */
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world(W, { objectTypes: { Machine, Site }, linkTypes, actionTypes: { mark } });
  }, 120_000);
  afterAll(async () => s?.close());

  /** A write in data; answers its commit (the consistency token's data=<n>). */
  const write = async (method: 'PUT' | 'POST' | 'DELETE', path: string, body?: Record<string, unknown>) => {
    const res = await s.dataCall(method, `/v1/worlds/${path}`, body === undefined ? {} : { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
    const token = String(res.headers['x-consistency-token']);
    tokens.push(token);
    return Number(token.replace('data=', ''));
  };
  const machine = (world: string, pk: string, load: number) =>
    write('PUT', `${world}/objects/Machine/${pk}`, { properties: { id: pk, load } });
  /** An instant strictly between the writes before and after it (the clocks are the same machine's). */
  const between = async () => {
    await sleep(30);
    const at = new Date().toISOString();
    await sleep(30);
    return at;
  };
  const tag = async (world: string, name: string) => {
    const made = await s.controlCall('PUT', `/v1/worlds/${world}/tags/${name}`, { body: {} });
    expect(made.statusCode, made.body).toBe(201);
    const got = await s.until(`tag ${world}/${name} COMPLETE`, async () => {
      const t = (await s.controlCall('GET', `/v1/worlds/${world}/tags/${name}`)).json();
      return t.status === 'COMPLETE' ? t : undefined;
    });
    return got.ref.data as number;
  };
  /** Intelligence has applied everything the test wrote (the last token of each world). */
  const applied = async (world: string) => {
    const last = tokens.at(-1) ?? '';
    const res = await s.intelCall('GET', `/v1/worlds/${world}/watermarks`, {
      headers: { 'x-consistency-token': last },
    });
    expect(res.statusCode, res.body).toBe(200);
  };

  async function define(path: string, body: Record<string, unknown>) {
    const res = await s.intelCall('PUT', `/v1/worlds/${W}/${path}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
  }
  /** Waits until the world has `count` alerts of this status now; answers them. */
  const alertsNow = (status: string, count: number) =>
    s.until(`${count} ${status} alerts`, async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/alerts?status=${status}`);
      const alerts = res.json().alerts as { id: string; rule: string; pk: string; status: string }[];
      return alerts.length === count ? alerts : undefined;
    });

  /** The GET routes of a service that take a ref in `at` (or another query parameter of AT_PATTERN), as URLs for `world`. */
  async function readsAtRef(service: 'data' | 'intelligence', world: string) {
    const call = service === 'data' ? s.dataCall : s.intelCall;
    const doc = (await call('GET', '/docs/json')).json() as Document;
    const out: { route: string; url: (ref: string, others: string) => string }[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      const get = ops.get;
      if (!get) continue;
      const params = get.parameters ?? [];
      const refs = params.filter((p) => p.in === 'query' && (p.name === 'at' || p.schema?.pattern?.includes('[Tt ]')));
      if (refs.length === 0) continue;
      let url = path;
      for (const p of params.filter((p) => p.in === 'path')) {
        const kind = path.split('/')[4] ?? '';
        const value =
          p.name === 'world' ? world : p.name === 'name' ? FILL[kind] : p.name === 'id' ? ids[kind] : FILL[p.name];
        if (value === undefined) throw new Error(`${service} ${path}: no value for path parameter ${p.name}`);
        url = url.replace(`{${p.name}}`, encodeURIComponent(value));
      }
      const fixed = params
        .filter((p) => p.in === 'query' && p.required && !refs.includes(p))
        .map((p) => {
          const value = FILL[p.name];
          if (value === undefined) throw new Error(`${service} ${path}: no value for query parameter ${p.name}`);
          return `${p.name}=${encodeURIComponent(value)}`;
        });
      out.push({
        route: `${service} GET ${path}`,
        // The first ref parameter at the ref under test, any other (the diff's `to`) at `others`.
        url: (ref, others) =>
          `${url}?${[...fixed, ...refs.map((p, i) => `${p.name}=${encodeURIComponent(i === 0 ? ref : others)}`)].join('&')}`,
      });
    }
    return out;
  }

  it('on every read route of both services: a tag reads as its commit, an instant as the commit it names', async () => {
    // Writes of every kind and definitions, with instants between them: t0 after the first state,
    // t1 after the second (double changed, big raised on m1), then v1; after it big is cleared.
    await write('PUT', `${W}/objects/Site/s1`, { properties: { id: 's1' } });
    await machine(W, 'm1', 1);
    await machine(W, 'm2', 2);
    const c0 = await write('PUT', `${W}/links/hosts/s1/m1`);
    await define('derived-properties/double', { objectType: 'Machine', expression: 'self.load * 2' });
    await define('rules/big', {
      objectType: 'Machine',
      condition: 'self.load > 5',
      alertType: 'load.high',
      severity: 'warning',
    });
    await define('decision-definitions/review', {
      rule: 'big',
      actionType: 'mark',
      parameters: { machine: 'self.id' },
      approval: 'manual',
    });
    const t0 = await between();
    await machine(W, 'm1', 10);
    await write('POST', `${W}/series/Machine/m1/temperature`, {
      points: [{ time: '2026-01-01T00:00:00Z', value: 20 }],
    });
    await define('derived-properties/double', { objectType: 'Machine', expression: 'self.load * 3' });
    // An action between t0 and t1: none at t0, COMPLETED from t1 on.
    const started = await s.intelCall('POST', `/v1/worlds/${W}/actions/mark`, {
      body: { parameters: { machine: 'm2' } },
      headers: { 'idempotency-key': 'refs-mark-m2' },
    });
    expect(started.statusCode, started.body).toBe(202);
    ids.actions = started.json().id;
    await s.until('the action on m2 COMPLETED', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/actions/${ids.actions}`);
      return res.json().status === 'COMPLETED' ? true : undefined;
    });
    const c1 = await write('DELETE', `${W}/links/hosts/s1/m1`);
    const raised = await alertsNow('OPEN', 1);
    ids.alerts = raised[0]?.id ?? '';
    const decided = await s.until('the decision on big/m1', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/decisions`);
      return (res.json().decisions as { id: string }[])[0];
    });
    ids.decisions = decided.id;
    const t1 = await between();
    const v1 = await tag(W, 'v1');
    const head = String(await machine(W, 'm1', 1));
    await alertsNow('CLEARED', 1);
    const rejected = await s.intelCall('POST', `/v1/worlds/${W}/decisions/${ids.decisions}/reject`, {
      body: { reason: 'after v1' },
    });
    expect(rejected.statusCode, rejected.body).toBe(200);
    await applied(W);

    const routes = [...(await readsAtRef('data', W)), ...(await readsAtRef('intelligence', W))];
    // The enumeration itself is checked: every read of intelligence's state is among them.
    expect(routes.map((r) => r.route)).toEqual(
      expect.arrayContaining([
        'data GET /v1/worlds/{world}/objects/{type}/{pk}',
        'intelligence GET /v1/worlds/{world}/objects/{type}/{pk}',
        'intelligence GET /v1/worlds/{world}/objects/{type}/{pk}/derived',
        'intelligence GET /v1/worlds/{world}/alerts',
        'intelligence GET /v1/worlds/{world}/alerts/{id}',
        'intelligence GET /v1/worlds/{world}/derived-properties',
        'intelligence GET /v1/worlds/{world}/derived-properties/{name}',
        'intelligence GET /v1/worlds/{world}/rules',
        'intelligence GET /v1/worlds/{world}/rules/{name}',
        'intelligence GET /v1/worlds/{world}/decision-definitions',
        'intelligence GET /v1/worlds/{world}/decision-definitions/{name}',
        'intelligence GET /v1/worlds/{world}/decisions',
        'intelligence GET /v1/worlds/{world}/decisions/{id}',
        'intelligence GET /v1/worlds/{world}/actions',
        'intelligence GET /v1/worlds/{world}/actions/{id}',
      ]),
    );
    for (const { route, url } of routes) {
      const call = route.startsWith('data') ? s.dataCall : s.intelCall;
      let found = 0;
      for (const [ref, commit] of [
        ['v1', v1],
        [t0, c0],
        [t1, c1],
      ] as const) {
        const byRef = await call('GET', url(ref, head));
        const byCommit = await call('GET', url(String(commit), head));
        expect(byRef.statusCode, `${route} at ${ref}: ${byRef.body}`).toBe(byCommit.statusCode);
        expect([200, 404], `${route} at ${commit}: ${byCommit.body}`).toContain(byCommit.statusCode);
        expect(byRef.json(), `${route} at ${ref} = ${commit}`).toEqual(byCommit.json());
        if (byCommit.statusCode === 200) found++;
      }
      // Not a comparison of two 404s only: every route answers at some of the refs.
      expect(found, route).toBeGreaterThan(0);
    }

    // What intelligence's state was at each ref, as the test made it.
    const state = async (ref: string) => {
      const get = async (path: string) => (await s.intelCall('GET', `/v1/worlds/${W}/${path}at=${ref}`)).json();
      const alerts = (await get('alerts?')).alerts as { rule: string; pk: string; status: string }[];
      const derived = (await get('derived-properties?')).derivedProperties as {
        name: string;
        version: number;
        expression: string;
      }[];
      return {
        derived: derived.map((d) => `${d.name}@${d.version}:${d.expression}`),
        rules: ((await get('rules?')).rules as { name: string }[]).map((r) => r.name),
        decisions: ((await get('decision-definitions?')).decisionDefinitions as { name: string }[]).map((d) => d.name),
        alerts: alerts.map((a) => `${a.rule}/${a.pk}:${a.status}`),
        made: ((await get('decisions?')).decisions as { definition: string; pk: string; status: string }[]).map(
          (d) => `${d.definition}/${d.pk}:${d.status}`,
        ),
        actions: ((await get('actions?')).actions as { actionType: string; status: string }[]).map(
          (a) => `${a.actionType}:${a.status}`,
        ),
      };
    };
    expect(await state(t0)).toEqual({
      derived: ['double@1:self.load * 2'],
      rules: ['big'],
      decisions: ['review'],
      alerts: [],
      made: [],
      actions: [],
    });
    const atT1 = {
      derived: ['double@2:self.load * 3'],
      rules: ['big'],
      decisions: ['review'],
      alerts: ['big/m1:OPEN'],
      made: ['review/m1:PENDING_APPROVAL'],
      actions: ['mark:COMPLETED'],
    };
    expect(await state(t1)).toEqual(atT1);
    expect(await state('v1')).toEqual(atT1);
    expect((await s.intelCall('GET', `/v1/worlds/${W}/alerts/${ids.alerts}`)).json().status).toBe('CLEARED');
    expect((await s.intelCall('GET', `/v1/worlds/${W}/alerts/${ids.alerts}?at=v1`)).json().status).toBe('OPEN');
    expect((await s.intelCall('GET', `/v1/worlds/${W}/alerts/${ids.alerts}?at=${t0}`)).statusCode).toBe(404);
    expect((await s.intelCall('GET', `/v1/worlds/${W}/decisions/${ids.decisions}`)).json().status).toBe('REJECTED');
    const then = (await s.intelCall('GET', `/v1/worlds/${W}/decisions/${ids.decisions}?at=v1`)).json();
    expect([then.status, then.reason]).toEqual(['PENDING_APPROVAL', null]);
    expect((await s.intelCall('GET', `/v1/worlds/${W}/actions/${ids.actions}?at=${t0}`)).statusCode).toBe(404);
    const acted = (await s.intelCall('GET', `/v1/worlds/${W}/actions/${ids.actions}?at=v1`)).json();
    expect([acted.status, acted.steps.map((st: { state: string }) => st.state)]).toEqual(['COMPLETED', ['COMPLETED']]);

    // The same object at the same instant in both services, as the test wrote it.
    for (const [at, load] of [
      [t0, 1],
      [t1, 10],
    ] as const) {
      const inData = (await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=${at}`)).json();
      const inIntelligence = (await s.intelCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=${at}`)).json();
      expect([inData.version, inData.properties.load]).toEqual([inIntelligence.version, load]);
      expect(inIntelligence.properties).toEqual(inData.properties);
    }
  }, 180_000);

  it('in a fork: an instant reads through the chain, as in data', async () => {
    const before = await between();
    await s.controlCall('POST', '/v1/worlds', { body: { id: 'refs-fork', from: { world: W } } });
    await s.until('refs-fork READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/refs-fork')).json().status === 'READY' ? true : undefined,
    );
    const forked = await between();
    await machine('refs-fork', 'm1', 7);
    const after = await between();
    await applied('refs-fork');
    for (const at of [forked, after]) {
      const inData = await s.dataCall('GET', `/v1/worlds/refs-fork/objects/Machine/m1?at=${at}`);
      const inIntelligence = await s.intelCall('GET', `/v1/worlds/refs-fork/objects/Machine/m1?at=${at}`);
      expect(inData.statusCode, inData.body).toBe(200);
      expect(inIntelligence.statusCode, inIntelligence.body).toBe(200);
      expect([inIntelligence.json().version, inIntelligence.json().properties]).toEqual([
        inData.json().version,
        inData.json().properties,
      ]);
    }
    expect(
      (await s.intelCall('GET', `/v1/worlds/refs-fork/objects/Machine/m1?at=${forked}`)).json().properties.load,
    ).toBe(1);
    expect(
      (await s.intelCall('GET', `/v1/worlds/refs-fork/objects/Machine/m1?at=${after}`)).json().properties.load,
    ).toBe(7);

    // Bad instants, in both services alike: before the world, in the future, not an instant.
    for (const call of [s.dataCall, s.intelCall]) {
      const problem = async (ref: string, status: number) =>
        expect(
          expectProblem(
            await call('GET', `/v1/worlds/refs-fork/objects/Machine/m1?at=${encodeURIComponent(ref)}`),
            status,
          ).errors[0].path,
        ).toBe('querystring/at');
      await problem(before, 422);
      await problem(new Date(Date.now() + 3_600_000).toISOString(), 422);
      await problem('2026-02-30T25:00:00Z', 400);
    }
    // A day its month does not have, in the world's lifetime (its start moved back here): 400, not 5xx.
    const dataPg = s.data?.app.pg;
    const intelligencePg = s.intelligence?.app.pg;
    if (!dataPg || !intelligencePg) throw new Error('the stack has no data or no intelligence');
    await dataPg.query(`UPDATE worlds SET provisioned_at = '2020-01-01T00:00:00Z' WHERE id = 'refs-fork'`);
    await intelligencePg.query(
      `UPDATE data_world_starts SET created_at = '2020-01-01T00:00:00Z' WHERE world_id = 'refs-fork'`,
    );
    for (const call of [s.dataCall, s.intelCall]) {
      const res = await call('GET', '/v1/worlds/refs-fork/objects/Machine/m1?at=2026-02-30T00:00:00Z');
      expect(expectProblem(res, 400).errors[0].path).toBe('querystring/at');
    }
  }, 180_000);
});

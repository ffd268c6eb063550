import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../services/control/test/control-service.js';
import { forkWorld, type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/**
 * Audit completeness (issue 32 item 5, docs/adr/0084): every state-changing operation of the
 * three OpenAPI documents is called once with a valid request, and control's audit trail
 * (GET /v1/audit, fed through onto.audit) holds exactly one record of each call, found by its
 * request id. An operation that is neither called here nor listed below with its reason fails
 * the test, as does a listed one that no longer exists.
 */

type Service = 'control' | 'data' | 'intelligence';
type Method = 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** POSTs that change nothing: the body is a query (no record is expected, none is written). */
const QUERIES: Record<string, string> = {
  'data POST /v1/worlds/{world}/objects/{type}/query': 'an object-set query: the body is the filter',
  'data POST /v1/worlds/{world}/objects/{type}/aggregate': 'an aggregation over an object set',
  'intelligence POST /v1/worlds/{world}/objects/{type}/query': 'an object-set query over the read model',
  'intelligence POST /v1/worlds/{world}/objects/{type}/aggregate': 'an aggregation over the read model',
};

const W = 'audited';
const FORK = 'audited-fork';
const str = { type: 'string', required: true };
const schema = {
  objectTypes: {
    Order: {
      displayName: 'Order',
      primaryKey: 'id',
      properties: {
        id: str,
        amount: { type: 'integer', indexed: true },
        flagged: { type: 'boolean' },
        load: { type: { type: 'series', value: 'double' } },
      },
    },
    Customer: {
      displayName: 'Customer',
      primaryKey: 'id',
      properties: { id: str, creditLimit: { type: 'integer' }, note: { type: 'string' } },
    },
  },
  linkTypes: { placedBy: { from: 'Order', to: 'Customer', cardinality: 'MANY_TO_MANY' } },
  actionTypes: {
    flagOrder: {
      parameters: { order: str },
      edits: [
        { op: 'modifyObject', objectType: 'Order', pk: { param: 'order' }, values: { flagged: { value: true } } },
      ],
    },
    noteCustomer: {
      parameters: { customer: str, note: str },
      edits: [
        { op: 'modifyObject', objectType: 'Customer', pk: { param: 'customer' }, values: { note: { param: 'note' } } },
      ],
    },
  },
};

interface Call {
  /** `<service> <METHOD> <OpenAPI path>`, as the document names the operation. */
  op: string;
  requestId: string;
  /** How many records the call makes: one, but for a batch of actions, one per item it starts. */
  records: number;
  actor: string;
}

interface AuditRecord {
  service: Service;
  actor: string;
  action: string;
  requestId: string;
  result: string;
  world: string | null;
}

describe('every state-changing operation is audited exactly once', () => {
  let s: IntelligenceStack;
  const calls: Call[] = [];

  const callOf = (service: Service) =>
    service === 'control' ? s.controlCall : service === 'data' ? s.dataCall : s.intelCall;

  /** Calls an operation with a valid request; it must succeed. */
  async function call(
    service: Service,
    method: Method,
    template: string,
    params: Record<string, string>,
    options: {
      body?: unknown;
      headers?: Record<string, string>;
      token?: string;
      records?: number;
      actor?: string;
    } = {},
  ): Promise<LightMyRequestResponse> {
    const url = template.replace(/\{(\w+)\}/g, (_, p: string) => {
      const value = params[p];
      if (value === undefined) throw new Error(`no value for {${p}} of ${template}`);
      return encodeURIComponent(value);
    });
    const res = await callOf(service)(method, url, {
      ...(options.body === undefined ? {} : { body: options.body }),
      ...(options.headers ? { headers: options.headers } : {}),
      ...(options.token ? { token: options.token } : {}),
    });
    expect(res.statusCode, `${method} ${url}: ${res.body}`).toBeLessThan(300);
    calls.push({
      op: `${service} ${method} ${template}`,
      requestId: String(res.headers['x-request-id']),
      records: options.records ?? 1,
      actor: options.actor ?? 'admin',
    });
    return res;
  }

  const statusOf = async (world: string) => (await s.controlCall('GET', `/v1/worlds/${world}`)).json().status;
  const until = <T>(what: string, probe: () => Promise<T | undefined>, ms?: number) => s.until(what, probe, ms);

  beforeAll(async () => {
    s = await intelligenceStack({
      controlEnv: { MERGE_TIMEOUT_MS: '120000' },
      dataEnv: { ONTO_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' },
    });
    await s.identityKnown();
    await s.world(W, schema);
  }, 180_000);
  afterAll(async () => {
    await s?.close();
  });

  it('calls every operation, and finds one record of each call in GET /v1/audit', async () => {
    // control: identity.
    await call('control', 'POST', '/v1/auth/token', {}, { body: { apiToken: BOOTSTRAP } });
    await call('control', 'POST', '/v1/users', {}, { body: { id: 'ann' } });
    const token = (
      await call('control', 'POST', '/v1/users/{userId}/tokens', { userId: 'ann' }, { body: { name: 'a' } })
    ).json();
    await call(
      'control',
      'PUT',
      '/v1/worlds/{world}/members/{userId}',
      { world: W, userId: 'ann' },
      { body: { role: 'editor' } },
    );
    await call('control', 'DELETE', '/v1/worlds/{world}/members/{userId}', { world: W, userId: 'ann' });
    const signedIn = await s.controlCall('POST', '/v1/auth/token', { body: { apiToken: token.token } });
    expect(signedIn.statusCode, signedIn.body).toBe(200);
    calls.push({
      op: 'control POST /v1/auth/token',
      requestId: String(signedIn.headers['x-request-id']),
      records: 1,
      actor: 'ann',
    });
    await call('control', 'DELETE', '/v1/auth/token', {}, { token: signedIn.json().accessToken, actor: 'ann' });
    await call('control', 'DELETE', '/v1/users/{userId}/tokens/{tokenId}', { userId: 'ann', tokenId: token.id });

    // control: the schema, each kind put and deleted.
    const types = {
      'object-types': { displayName: 'Extra', primaryKey: 'id', properties: { id: str } },
      'link-types': { from: 'Order', to: 'Order', cardinality: 'MANY_TO_MANY' },
      'action-types': schema.actionTypes.flagOrder,
    };
    for (const [kind, body] of Object.entries(types)) {
      const name = kind === 'object-types' ? 'Extra' : kind === 'link-types' ? 'relatesTo' : 'flagAgain';
      await call('control', 'PUT', `/v1/worlds/{world}/${kind}/{apiName}`, { world: W, apiName: name }, { body });
    }
    for (const kind of ['action-types', 'link-types', 'object-types']) {
      const name = kind === 'object-types' ? 'Extra' : kind === 'link-types' ? 'relatesTo' : 'flagAgain';
      await call('control', 'DELETE', `/v1/worlds/{world}/${kind}/{apiName}`, { world: W, apiName: name });
    }
    await call('control', 'POST', '/v1/admin/worlds/{world}/schema/republish', { world: W });

    // control: worlds, tags, protection, retention.
    await call('control', 'PUT', '/v1/worlds/{world}/tags/{name}', { world: W, name: 'v1' }, { body: {} });
    await until('tag v1 complete', async () =>
      (await s.controlCall('GET', `/v1/worlds/${W}/tags/v1`)).json().status === 'COMPLETE' ? true : undefined,
    );
    await call('control', 'DELETE', '/v1/worlds/{world}/tags/{name}', { world: W, name: 'v1' });
    await call('control', 'PUT', '/v1/worlds/{world}/protection', { world: W }, { body: { requireMerge: false } });
    await call(
      'control',
      'PUT',
      '/v1/worlds/{world}/retention',
      { world: W },
      { body: { keepDays: 30, keepVersions: null } },
    );
    await call('control', 'POST', '/v1/worlds', {}, { body: { id: 'audited-gone' } });
    await until(
      'audited-gone READY',
      async () => ((await statusOf('audited-gone')) === 'READY' ? true : undefined),
      60_000,
    );
    await call('control', 'DELETE', '/v1/worlds/{world}', { world: 'audited-gone' });

    // data: objects, bulk, links, series.
    const objects = '/v1/worlds/{world}/objects/{type}/{pk}';
    await call(
      'data',
      'PUT',
      objects,
      { world: W, type: 'Order', pk: 'o-1' },
      { body: { properties: { id: 'o-1', amount: 5 } } },
    );
    await call(
      'data',
      'PUT',
      objects,
      { world: W, type: 'Customer', pk: 'c-1' },
      { body: { properties: { id: 'c-1' } } },
    );
    await call(
      'data',
      'PATCH',
      objects,
      { world: W, type: 'Order', pk: 'o-1' },
      { body: { properties: { amount: 6 } } },
    );
    await call(
      'data',
      'POST',
      '/v1/worlds/{world}/bulk/{type}',
      { world: W, type: 'Order' },
      {
        body: [{ properties: { id: 'o-2', amount: 1 } }, { properties: { id: 'o-3', amount: 2 } }],
      },
    );
    await call('data', 'DELETE', objects, { world: W, type: 'Order', pk: 'o-3' });
    const links = '/v1/worlds/{world}/links/{linkType}/{fromPk}/{toPk}';
    await call('data', 'PUT', links, { world: W, linkType: 'placedBy', fromPk: 'o-1', toPk: 'c-1' });
    await call('data', 'PUT', links, { world: W, linkType: 'placedBy', fromPk: 'o-2', toPk: 'c-1' });
    await call('data', 'DELETE', links, { world: W, linkType: 'placedBy', fromPk: 'o-2', toPk: 'c-1' });
    const now = new Date().toISOString();
    await call(
      'data',
      'POST',
      '/v1/worlds/{world}/series/{type}/{pk}/{series}',
      {
        world: W,
        type: 'Order',
        pk: 'o-1',
        series: 'load',
      },
      { body: { points: [{ time: now, value: 1.5 }] } },
    );
    await call(
      'data',
      'POST',
      '/v1/worlds/{world}/series',
      { world: W },
      {
        body: `${JSON.stringify({ type: 'Order', pk: 'o-2', series: 'load', time: now, value: 2 })}\n`,
        headers: { 'content-type': 'application/x-ndjson' },
      },
    );
    // data: webhooks and repairs.
    const hook = '/v1/worlds/{world}/webhooks/{name}';
    await call(
      'data',
      'PUT',
      hook,
      { world: W, name: 'h' },
      {
        body: { url: 'http://127.0.0.1:9/hook', events: ['object.updated'], active: false },
      },
    );
    await call('data', 'POST', `${hook}/rotate-secret`, { world: W, name: 'h' }, { body: {} });
    await call('data', 'DELETE', hook, { world: W, name: 'h' });
    await call('data', 'POST', '/v1/admin/webhooks/redrive', {}, { body: { world: W } });
    await call('data', 'POST', '/v1/admin/worlds/{world}/object-types/{type}/recount', { world: W, type: 'Order' });
    await call('data', 'POST', '/v1/admin/worlds/{world}/link-types/{type}/recount', { world: W, type: 'placedBy' });

    // intelligence: definitions, decisions, actions, repairs.
    const derived = { objectType: 'Customer', expression: 'self.id + "!"' };
    await call(
      'intelligence',
      'PUT',
      '/v1/worlds/{world}/derived-properties/{name}',
      { world: W, name: 'orders' },
      { body: derived },
    );
    await call(
      'intelligence',
      'PUT',
      '/v1/worlds/{world}/derived-properties/{name}',
      { world: W, name: 'spare' },
      { body: derived },
    );
    await call('intelligence', 'DELETE', '/v1/worlds/{world}/derived-properties/{name}', { world: W, name: 'spare' });
    await call('intelligence', 'POST', '/v1/admin/worlds/{world}/derived-properties/{name}/recompute', {
      world: W,
      name: 'orders',
    });
    const rule = {
      objectType: 'Customer',
      condition: 'self.creditLimit > 1000',
      alertType: 'credit.high',
      severity: 'warning',
    };
    await call('intelligence', 'PUT', '/v1/worlds/{world}/rules/{name}', { world: W, name: 'risky' }, { body: rule });
    await call('intelligence', 'PUT', '/v1/worlds/{world}/rules/{name}', { world: W, name: 'spare' }, { body: rule });
    await call('intelligence', 'DELETE', '/v1/worlds/{world}/rules/{name}', { world: W, name: 'spare' });
    const review = {
      alertType: 'credit.high',
      actionType: 'noteCustomer',
      parameters: { customer: 'alert.pk', note: '"reviewed"' },
      approval: 'manual',
    };
    const definitions = '/v1/worlds/{world}/decision-definitions/{name}';
    await call('intelligence', 'PUT', definitions, { world: W, name: 'review' }, { body: review });
    await call('intelligence', 'PUT', definitions, { world: W, name: 'spare' }, { body: review });
    await call('intelligence', 'DELETE', definitions, { world: W, name: 'spare' });
    for (const pk of ['c-2', 'c-3']) {
      const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/${pk}`, {
        body: { properties: { id: pk, creditLimit: 5000 } },
      });
      expect(res.statusCode, res.body).toBe(201);
      calls.push({
        op: `data PUT ${objects}`,
        requestId: String(res.headers['x-request-id']),
        records: 1,
        actor: 'admin',
      });
    }
    const pending = await until(
      'two decisions waiting for approval',
      async () => {
        const res = await s.intelCall('GET', `/v1/worlds/${W}/decisions`);
        const waiting = (res.json().decisions as { id: string; status: string }[]).filter(
          (d) => d.status === 'PENDING_APPROVAL',
        );
        return waiting.length >= 2 ? waiting : undefined;
      },
      30_000,
    );
    await call(
      'intelligence',
      'POST',
      '/v1/worlds/{world}/decisions/{id}/approve',
      { world: W, id: pending[0]?.id as string },
      { body: {} },
    );
    await call(
      'intelligence',
      'POST',
      '/v1/worlds/{world}/decisions/{id}/reject',
      { world: W, id: pending[1]?.id as string },
      { body: {} },
    );
    const action = '/v1/worlds/{world}/actions/{actionType}';
    await call(
      'intelligence',
      'POST',
      action,
      { world: W, actionType: 'flagOrder' },
      {
        body: { parameters: { order: 'o-1' } },
        headers: { 'idempotency-key': 'audit-1' },
      },
    );
    await call(
      'intelligence',
      'POST',
      `${action}/batch`,
      { world: W, actionType: 'flagOrder' },
      {
        body: {
          items: [
            { idempotencyKey: 'audit-2', parameters: { order: 'o-2' } },
            { idempotencyKey: 'audit-3', parameters: { order: 'o-1' } },
          ],
        },
        records: 2,
      },
    );

    // control: a merge settled by hand, applied, verified and reverted.
    await forkWorld(s, FORK, W);
    for (const world of [FORK, W]) {
      const res = await s.dataCall('PATCH', `/v1/worlds/${world}/objects/Order/o-2`, {
        body: { properties: { amount: world === W ? 20 : 10 } },
      });
      expect(res.statusCode, res.body).toBe(200);
    }
    const merges = '/v1/worlds/{world}/merges';
    const merge = (
      await call('control', 'POST', merges, { world: W }, { body: { source: FORK, strategy: 'MANUAL' } })
    ).json();
    const conflicts = await until(
      'the merge waits on its conflicts',
      async () => {
        const res = await s.controlCall('GET', `/v1/worlds/${W}/merges/${merge.id}`);
        return res.json().status === 'CONFLICTS' ? (res.json().conflicts as { id: string }[]) : undefined;
      },
      60_000,
    );
    for (const conflict of conflicts) {
      await call(
        'control',
        'PUT',
        `${merges}/{id}/conflicts/{conflictId}`,
        { world: W, id: merge.id, conflictId: conflict.id },
        {
          body: { take: 'source' },
        },
      );
    }
    await call('control', 'POST', `${merges}/{id}/apply`, { world: W, id: merge.id });
    await until(
      'the merge is MERGED',
      async () =>
        (await s.controlCall('GET', `/v1/worlds/${W}/merges/${merge.id}`)).json().status === 'MERGED'
          ? true
          : undefined,
      60_000,
    );
    await call('control', 'POST', '/v1/admin/worlds/{world}/merges/{id}/verify', { world: W, id: merge.id });
    const dryRevert = (
      await call(
        'control',
        'POST',
        '/v1/worlds/{world}/merges/{id}/revert',
        { world: W, id: merge.id },
        { body: { dryRun: true } },
      )
    ).json();
    const statusOfMerge = async (id: string) =>
      (await s.controlCall('GET', `/v1/worlds/${W}/merges/${id}`)).json().status as string;
    await until(
      'the dry revert settled',
      async () => ((await statusOfMerge(dryRevert.id)) !== 'RUNNING' ? true : undefined),
      60_000,
    );
    // A proposal (docs/adr/0085): a merge into the world once it asks for an approval, approved by another owner.
    const bo = await s.user('bo', W, 'owner');
    const protect = await s.controlCall('PUT', `/v1/worlds/${W}/protection`, {
      body: { requireMerge: false, requiredApprovals: 1 },
    });
    expect(protect.statusCode, protect.body).toBe(200);
    const proposal = await s.controlCall('POST', `/v1/worlds/${W}/merges`, {
      body: { source: FORK, strategy: 'SOURCE_WINS' },
    });
    expect(proposal.statusCode, proposal.body).toBe(202);
    await until(
      'the merge is PROPOSED',
      async () => ((await statusOfMerge(proposal.json().id)) === 'PROPOSED' ? true : undefined),
      60_000,
    );
    await call(
      'control',
      'POST',
      `${merges}/{id}/approve`,
      { world: W, id: proposal.json().id },
      { token: bo, actor: 'bo' },
    );
    await until(
      'the proposal is MERGED',
      async () => ((await statusOfMerge(proposal.json().id)) === 'MERGED' ? true : undefined),
      60_000,
    );

    // Every service's outbox and inbox repairs, then the signing key, last (its tokens need the replicas).
    for (const service of ['control', 'data', 'intelligence'] as const) {
      await call(service, 'POST', '/v1/admin/outbox/set-aside/redrive', {}, { body: {} });
      await call(service, 'POST', '/v1/admin/inbox/release', {}, { body: { consumer: 'nobody', eventIds: [] } });
    }
    await call('control', 'POST', '/v1/admin/signing-keys/rotate', {}, { body: {} });

    // Every state-changing operation of the three documents was called, or is a listed query.
    const documented: string[] = [];
    for (const service of ['control', 'data', 'intelligence'] as const) {
      const doc = (await callOf(service)('GET', '/docs/json')).json() as {
        paths: Record<string, Record<string, unknown>>;
      };
      for (const [path, item] of Object.entries(doc.paths)) {
        for (const method of Object.keys(item)) {
          if (['post', 'put', 'patch', 'delete'].includes(method))
            documented.push(`${service} ${method.toUpperCase()} ${path}`);
        }
      }
    }
    const called = new Set(calls.map((c) => c.op));
    expect(
      documented.filter((op) => !called.has(op) && !(op in QUERIES)).sort(),
      'operations neither called nor listed',
    ).toEqual([]);
    expect(
      [...called, ...Object.keys(QUERIES)].filter((op) => !documented.includes(op)),
      'called or listed, not documented',
    ).toEqual([]);

    // Each call's records, once control has consumed them all: exactly as many as it makes.
    const recordsOf = async (requestId: string) => {
      const res = await s.controlCall('GET', `/v1/audit?requestId=${encodeURIComponent(requestId)}`);
      expect(res.statusCode, res.body).toBe(200);
      return res.json().records as AuditRecord[];
    };
    for (const c of calls) {
      await until(
        `the audit record of ${c.op} (${c.requestId})`,
        async () => ((await recordsOf(c.requestId)).length >= c.records ? true : undefined),
        30_000,
      );
    }
    for (const c of calls) {
      const records = await recordsOf(c.requestId);
      expect(records.length, `${c.op} (${c.requestId}): ${JSON.stringify(records)}`).toBe(c.records);
      for (const r of records) {
        expect(r, c.op).toMatchObject({ service: c.op.split(' ')[0], actor: c.actor, requestId: c.requestId });
        expect(r.action, c.op).toMatch(/^[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)+$/);
      }
    }
  }, 600_000);
});

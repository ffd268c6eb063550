import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

const W = 'decide';
const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    creditLimit: { type: 'integer' },
    flagged: { type: 'boolean' },
    note: { type: 'string' },
  },
};
const flagCustomer = {
  parameters: { customer: { type: 'string', required: true }, note: { type: 'string' } },
  edits: [
    {
      op: 'modifyObject',
      objectType: 'Customer',
      pk: { param: 'customer' },
      values: { flagged: { value: true }, note: { param: 'note' } },
    },
  ],
};

interface DecisionBody {
  id: string;
  definition: string;
  status: string;
  pk: string;
  actionId: string | null;
  parameters: Record<string, unknown> | null;
  decidedBy: string | null;
  reason: string | null;
  error: { message: string } | null;
}

describe('decisions', () => {
  let s: IntelligenceStack;
  let viewer: string;

  beforeAll(async () => {
    s = await intelligenceStack();
    await s.world(W, { objectTypes: { Customer }, actionTypes: { flagCustomer } });
    viewer = await s.user('vic', W, 'viewer');
    const create = async (path: string, body: object) => {
      const res = await s.intelCall('PUT', `/v1/worlds/${W}/${path}`, { body });
      expect(res.statusCode, res.body).toBe(201);
    };
    await create('rules/risky', {
      objectType: 'Customer',
      condition: 'self.creditLimit > 1000',
      alertType: 'credit.high',
      severity: 'critical',
    });
    await create('decision-definitions/flag', {
      rule: 'risky',
      actionType: 'flagCustomer',
      parameters: { customer: 'self.id', note: '"limit " + string(self.creditLimit)' },
      approval: 'automatic',
    });
    await create('decision-definitions/review', {
      alertType: 'credit.high',
      actionType: 'flagCustomer',
      parameters: { customer: 'alert.pk', note: '"reviewed: " + alert.severity' },
      approval: 'manual',
    });
  }, 120_000);
  afterAll(async () => s?.close());

  const decisionsOf = (pk: string, count: number) =>
    s.until(`${count} decisions for ${pk}`, async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/decisions`);
      expect(res.statusCode, res.body).toBe(200);
      const mine = (res.json().decisions as DecisionBody[]).filter((d) => d.pk === pk);
      return mine.length >= count ? mine : undefined;
    });
  const customer = async (pk: string, creditLimit: number) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/${pk}`, {
      body: { properties: { id: pk, creditLimit } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };

  it('a raised alert makes decisions: automatic ones start their action at once', async () => {
    await customer('c1', 5000);
    const decisions = await decisionsOf('c1', 2);
    const auto = decisions.find((d) => d.definition === 'flag');
    expect(auto).toMatchObject({
      status: 'EXECUTED',
      parameters: { customer: 'c1', note: 'limit 5000' },
      decidedBy: 'decision:flag',
      error: null,
    });
    expect(auto?.actionId).toEqual(expect.any(String));
    expect(decisions.find((d) => d.definition === 'review')).toMatchObject({
      status: 'PENDING_APPROVAL',
      parameters: { customer: 'c1', note: 'reviewed: critical' },
      actionId: null,
    });
    // The action ran as a saga: data holds its edit.
    const action = await s.until('the action completed', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/actions/${auto?.actionId}`);
      return res.statusCode === 200 && res.json().status === 'COMPLETED' ? res.json() : undefined;
    });
    expect(action).toMatchObject({ actionType: 'flagCustomer', idempotencyKey: `decision:${auto?.id}` });
    const c1 = await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1`);
    expect(c1.json().properties).toMatchObject({ flagged: true, note: 'limit 5000' });
    // Published: made then executed, keyed by world and decision.
    const records = await s.records('domain.decisions', (seen) =>
      seen.some((r) => r.event.type === 'decision.executed' && r.event.payload.decisionId === auto?.id),
    );
    const events = records.filter((r) => r.event.payload.decisionId === auto?.id);
    expect(events.map((r) => [r.event.type, r.event.payload.status])).toEqual([
      ['decision.made', 'APPROVED'],
      ['decision.executed', 'EXECUTED'],
    ]);
    expect(events[0]?.record.key).toBe(`${W}/${auto?.id}`);
    expect(events[1]?.event.caused_by).toBe(events[0]?.event.event_id);
    expect(events[1]?.event.payload.actionId).toBe(auto?.actionId);
    // The alert stays open while the condition holds: no second decision for c1.
    await customer('c1', 6000);
    await s.until('c1 at 6000 in intelligence', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/objects/Customer/c1`);
      return res.json().properties?.creditLimit === 6000 ? true : undefined;
    });
    expect(await decisionsOf('c1', 2)).toHaveLength(2);
  });

  it('manual decisions wait for approval or rejection, once', async () => {
    await customer('c2', 2000);
    await customer('c3', 3000);
    const c2 = (await decisionsOf('c2', 2)).find((d) => d.definition === 'review') as DecisionBody;
    const c3 = (await decisionsOf('c3', 2)).find((d) => d.definition === 'review') as DecisionBody;
    expect(c2.status).toBe('PENDING_APPROVAL');

    const approved = await s.intelCall('POST', `/v1/worlds/${W}/decisions/${c2.id}/approve`, {
      body: { reason: 'looks right' },
    });
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json()).toMatchObject({ status: 'EXECUTED', decidedBy: 'admin', reason: 'looks right' });
    const actionId = approved.json().actionId as string;
    await s.until('the approved action completed', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/actions/${actionId}`);
      return res.json().status === 'COMPLETED' ? true : undefined;
    });
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c2`)).json().properties.note).toMatch(
      /^(reviewed: critical|limit 2000)$/,
    );

    const rejected = await s.intelCall('POST', `/v1/worlds/${W}/decisions/${c3.id}/reject`, { body: {} });
    expect(rejected.statusCode, rejected.body).toBe(200);
    expect(rejected.json()).toMatchObject({ status: 'REJECTED', actionId: null });
    // A decision is decided once.
    for (const [id, verdict] of [
      [c2.id, 'approve'],
      [c3.id, 'approve'],
      [c3.id, 'reject'],
    ]) {
      const again = expectProblem(
        await s.intelCall('POST', `/v1/worlds/${W}/decisions/${id}/${verdict}`, { body: {} }),
        409,
      );
      expect(again.detail).toMatch(/not PENDING_APPROVAL/);
    }
    const one = await s.intelCall('GET', `/v1/worlds/${W}/decisions/${c3.id}`);
    expect(one.json()).toMatchObject({ id: c3.id, status: 'REJECTED' });
    const filtered = await s.intelCall('GET', `/v1/worlds/${W}/decisions?status=REJECTED`);
    expect(filtered.json().decisions.map((d: DecisionBody) => d.id)).toEqual([c3.id]);
    // Only editors decide.
    expectProblem(
      await s.intelCall('POST', `/v1/worlds/${W}/decisions/${c3.id}/approve`, { token: viewer, body: {} }),
      403,
    );
  });

  it('refuses bad input on every endpoint with problem+json, storing nothing', async () => {
    const bad = async (
      method: 'GET' | 'PUT' | 'POST' | 'DELETE',
      url: string,
      status: number,
      body?: unknown,
      headers?: Record<string, string>,
    ) => {
      const res = await s.intelCall(method, url, { body, ...(headers ? { headers } : {}) });
      return expectProblem(res, status);
    };
    const base = `/v1/worlds/${W}`;
    const derived = { objectType: 'Customer', expression: 'self.creditLimit * 2' };
    // derived properties
    expect((await bad('PUT', `${base}/derived-properties/x`, 400, { ...derived, extra: 1 })).errors).toEqual([
      { path: 'body/extra', message: expect.any(String) },
    ]);
    expect((await bad('PUT', `${base}/derived-properties/x`, 400, { objectType: 'Customer' })).errors[0].path).toBe(
      'body/expression',
    );
    await bad('PUT', `${base}/derived-properties/x`, 400, { ...derived, maxStalenessMs: '5' });
    await bad('PUT', `${base}/derived-properties/x`, 400, { ...derived, maxStalenessMs: 0 });
    await bad('PUT', `${base}/derived-properties/x`, 400, {
      ...derived,
      aggregates: { 'bad alias': { function: 'count', linkType: 'l' } },
    });
    await bad('PUT', `${base}/derived-properties/x`, 400, {
      ...derived,
      aggregates: { a: { function: 'median', linkType: 'l' } },
    });
    await bad('PUT', `${base}/derived-properties/1x`, 400, derived);
    await bad('PUT', '/v1/worlds/Bad_World/derived-properties/x', 400, derived);
    await bad('PUT', `${base}/derived-properties/x`, 400, derived, { 'if-match': 'yesterday' });
    await bad('PUT', `${base}/derived-properties/x`, 412, derived, { 'if-match': '"3"' });
    expect(
      (await bad('PUT', `${base}/derived-properties/x`, 422, { ...derived, expression: 'self.creditLimit *' }))
        .errors[0],
    ).toMatchObject({
      path: '/expression',
      message: expect.stringMatching(/not valid CEL/),
    });
    await bad('PUT', '/v1/worlds/nowhere/derived-properties/x', 404, derived);
    await bad('GET', `${base}/derived-properties/x`, 404);
    await bad('GET', `${base}/derived-properties?objectType=1`, 400);
    await bad('GET', `${base}/derived-properties?color=red`, 400);
    await bad('DELETE', `${base}/derived-properties/x`, 404);
    expect((await s.intelCall('GET', `${base}/derived-properties`)).json().derivedProperties).toEqual([]);
    // rules
    const rule = { objectType: 'Customer', condition: 'self.creditLimit > 1', alertType: 'a', severity: 'warning' };
    await bad('PUT', `${base}/rules/r`, 400, { ...rule, severity: 'fatal' });
    await bad('PUT', `${base}/rules/r`, 400, { ...rule, alertType: 'no spaces' });
    expect((await bad('PUT', `${base}/rules/r`, 422, { ...rule, condition: 'derived.nope' })).errors).toEqual([
      { path: '/condition', message: 'derived.nope: derived property nope is not defined' },
    ]);
    await bad('PUT', `${base}/rules/r`, 422, { ...rule, objectType: 'Nope' });
    await bad('PUT', `${base}/rules/r`, 403, rule, { authorization: `Bearer ${viewer}` });
    await bad('GET', `${base}/rules/r`, 404);
    await bad('GET', `${base}/rules?severity=high`, 400);
    await bad('DELETE', `${base}/rules/r`, 404);
    expect((await bad('DELETE', `${base}/rules/risky`, 409)).detail).toMatch(/decision definition flag/);
    expect((await s.intelCall('GET', `${base}/rules`)).json().rules.map((r: { name: string }) => r.name)).toEqual([
      'risky',
    ]);
    // alerts
    await bad('GET', `${base}/alerts?status=open`, 400);
    await bad('GET', `${base}/alerts?limit=0`, 400);
    await bad('GET', `${base}/alerts?cursor=bm90LW1pbmU`, 400);
    await bad('GET', `${base}/alerts/not-a-uuid`, 400);
    await bad('GET', `${base}/alerts/01900000-0000-7000-8000-000000000000`, 404);
    await bad('GET', '/v1/worlds/nowhere/alerts', 404);
    // decision definitions
    const decision = {
      rule: 'risky',
      actionType: 'flagCustomer',
      parameters: { customer: 'self.id' },
      approval: 'manual',
    };
    await bad('PUT', `${base}/decision-definitions/d`, 400, { ...decision, approval: 'sometimes' });
    await bad('PUT', `${base}/decision-definitions/d`, 400, { ...decision, parameters: { customer: 3 } });
    const paths = async (body: unknown) =>
      (await bad('PUT', `${base}/decision-definitions/d`, 422, body)).errors.map((e: { path: string }) => e.path);
    expect(await paths({ ...decision, alertType: 'credit.high' })).toEqual(['/rule']);
    expect(await paths({ ...decision, actionType: 'nope' })).toEqual(['/actionType']);
    expect(await paths({ ...decision, parameters: { customer: 'self.id', size: '1' } })).toEqual(['/parameters/size']);
    expect(await paths({ ...decision, parameters: { note: '"x"' } })).toEqual(['/parameters/customer']);
    expect(await paths({ ...decision, parameters: { customer: 'alert.color' } })).toEqual(['/parameters/customer']);
    expect(await paths({ ...decision, rule: 'ghost' })).toEqual(['/rule']);
    await bad('GET', `${base}/decision-definitions/d`, 404);
    await bad('DELETE', `${base}/decision-definitions/d`, 404);
    expect(
      (await s.intelCall('GET', `${base}/decision-definitions`))
        .json()
        .decisionDefinitions.map((d: { name: string }) => d.name),
    ).toEqual(['flag', 'review']);
    // decisions
    await bad('GET', `${base}/decisions?status=DONE`, 400);
    await bad('GET', `${base}/decisions/123`, 400);
    await bad('GET', `${base}/decisions/01900000-0000-7000-8000-000000000000`, 404);
    await bad('POST', `${base}/decisions/01900000-0000-7000-8000-000000000000/approve`, 404, {});
    await bad('POST', `${base}/decisions/01900000-0000-7000-8000-000000000000/approve`, 404);
    await bad('POST', `${base}/decisions/01900000-0000-7000-8000-000000000000/reject`, 400, { reason: 'x', why: 1 });
    // the read model
    await bad('GET', `${base}/objects/Customer/nobody`, 404);
    await bad('GET', `${base}/objects/1bad/x`, 400);
    await bad('GET', `${base}/objects/Customer/c1/derived`, 400, undefined, { 'x-consistency-token': 'data=soon' });
    const anonymous = await s.intelCall('GET', `${base}/alerts`, { headers: { authorization: '' } });
    expectProblem(anonymous, 401);
  });
});

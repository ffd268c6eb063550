import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * A fork's definitions in intelligence (issue 16, docs/adr/0033): a world forked through control
 * starts with its base's derived properties, rules and decision definitions, which then change
 * apart, and evaluates its own objects with its own copies.
 */

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    creditLimit: { type: 'integer' },
    flagged: { type: 'boolean' },
  },
};
const flagCustomer = {
  parameters: { customer: { type: 'string', required: true } },
  edits: [
    { op: 'modifyObject', objectType: 'Customer', pk: { param: 'customer' }, values: { flagged: { value: true } } },
  ],
};

interface Definition {
  name: string;
  version: number;
  state: string;
  expression?: string;
  condition?: string;
  rule?: string;
}

describe('forks in intelligence', () => {
  let s: IntelligenceStack;
  let token = '';

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world('base', { objectTypes: { Customer }, actionTypes: { flagCustomer } });
    await define('base', 'derived-properties/doubled', { objectType: 'Customer', expression: 'self.creditLimit * 2' });
    await define('base', 'rules/risky', {
      objectType: 'Customer',
      condition: 'self.creditLimit > 1000',
      alertType: 'credit.high',
      severity: 'warning',
    });
    await define('base', 'decision-definitions/review', {
      rule: 'risky',
      actionType: 'flagCustomer',
      parameters: { customer: 'self.id' },
      approval: 'manual',
    });
  }, 120_000);
  afterAll(async () => s?.close());

  async function define(world: string, path: string, body: Record<string, unknown>) {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/${path}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return res.json() as Definition;
  }
  const definition = async (world: string, path: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/${path}`);
    expect(res.statusCode, `${world} ${path}: ${res.body}`).toBe(200);
    return res.json() as Definition;
  };
  /** Forks through control and waits until control says READY (data and intelligence provisioned it). */
  const fork = async (id: string, from: string) => {
    const res = await s.controlCall('POST', '/v1/worlds', { body: { id, from: { world: from } } });
    expect(res.statusCode, res.body).toBe(202);
    await s.until(`${id} READY`, async () =>
      (await s.controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
    );
  };
  const customer = async (world: string, pk: string, creditLimit: number) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/Customer/${pk}`, {
      body: { properties: { id: pk, creditLimit } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    token = String(res.headers['x-consistency-token']);
  };
  const doubled = (world: string, pk: string, expected: number) =>
    s.until(`${world} ${pk} doubled = ${expected}`, async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${world}/objects/Customer/${pk}`, {
        headers: { 'x-consistency-token': token },
      });
      if (res.statusCode === 404) return undefined;
      expect(res.statusCode, res.body).toBe(200);
      return res.json().derived?.doubled?.value === expected ? true : undefined;
    });
  const openAlerts = async (world: string, pk: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/alerts?pk=${pk}&status=OPEN`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json().alerts as { rule: string; inherited: boolean; world?: string }[];
  };

  it('a fork has its base’s definitions when READY; they change apart and evaluate the child’s objects', async () => {
    await fork('child', 'base');
    const base = {
      derived: await definition('base', 'derived-properties/doubled'),
      rule: await definition('base', 'rules/risky'),
      decision: await definition('base', 'decision-definitions/review'),
    };
    // READY means intelligence provisioned it, in the transaction that copied the definitions.
    const copied = await definition('child', 'derived-properties/doubled');
    expect(copied).toMatchObject({ expression: 'self.creditLimit * 2', version: base.derived.version });
    expect(await definition('child', 'rules/risky')).toMatchObject({
      condition: 'self.creditLimit > 1000',
      version: base.rule.version,
    });
    expect(await definition('child', 'decision-definitions/review')).toMatchObject({
      rule: 'risky',
      version: base.decision.version,
    });
    // Checked against the child's own schema (control's copy of the base's), once it is applied.
    await s.until('child definitions valid', async () => {
      const all = await Promise.all(
        ['derived-properties/doubled', 'rules/risky', 'decision-definitions/review'].map((p) => definition('child', p)),
      );
      return all.every((d) => d.state === 'valid') ? true : undefined;
    });

    // A change on either side stays on its side.
    await define('child', 'derived-properties/doubled', { objectType: 'Customer', expression: 'self.creditLimit * 3' });
    await define('base', 'rules/risky', {
      objectType: 'Customer',
      condition: 'self.creditLimit > 2000',
      alertType: 'credit.high',
      severity: 'warning',
    });
    expect(await definition('base', 'derived-properties/doubled')).toMatchObject({
      expression: 'self.creditLimit * 2',
      version: base.derived.version,
    });
    expect(await definition('child', 'derived-properties/doubled')).toMatchObject({
      expression: 'self.creditLimit * 3',
      version: base.derived.version + 1,
    });
    expect(await definition('child', 'rules/risky')).toMatchObject({
      condition: 'self.creditLimit > 1000',
      version: base.rule.version,
    });

    // Objects written on each side are evaluated there with that side's definitions.
    await customer('child', 'c1', 1500);
    await doubled('child', 'c1', 4500);
    await customer('base', 'c1', 1500);
    await doubled('base', 'c1', 3000);
    await s.until('the child’s copied rule raised an alert', async () =>
      (await openAlerts('child', 'c1')).length === 1 ? true : undefined,
    );
    await s.until('the child’s copied decision definition made a decision', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/child/decisions`);
      expect(res.statusCode, res.body).toBe(200);
      const mine = (res.json().decisions as { pk: string; definition: string; status: string }[]).filter(
        (d) => d.pk === 'c1',
      );
      return mine.length === 1 && mine[0]?.definition === 'review' && mine[0].status === 'PENDING_APPROVAL'
        ? true
        : undefined;
    });
    // The base's rule now asks for more than 1500: no alert there.
    expect(await openAlerts('base', 'c1')).toEqual([]);
  }, 120_000);

  it('a fork of a fork copies its base as it is then', async () => {
    await s.until('child READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/child')).json().status === 'READY' ? true : undefined,
    );
    const childVersion = (await definition('child', 'derived-properties/doubled')).version;
    await fork('grandchild', 'child');
    expect(await definition('grandchild', 'derived-properties/doubled')).toMatchObject({
      expression: 'self.creditLimit * 3',
      version: childVersion,
    });
    expect(await definition('grandchild', 'rules/risky')).toMatchObject({ condition: 'self.creditLimit > 1000' });
    await customer('grandchild', 'g1', 10);
    await doubled('grandchild', 'g1', 30);
    // Alerts and decisions belong to their world: the child's open alert on c1 is listed as
    // inherited, read-only (docs/adr/0033), and the grandchild raised none of its own.
    expect(await openAlerts('grandchild', 'c1')).toMatchObject([{ rule: 'risky', inherited: true, world: 'child' }]);
    const decisions = await s.intelCall('GET', '/v1/worlds/grandchild/decisions');
    expect(decisions.json().decisions).toEqual([]);
  }, 120_000);
});

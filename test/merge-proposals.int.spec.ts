import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';
import { Customer, MERGE_STACK, type Merge, mergeCalls } from './merge-helpers.js';

/**
 * Merge proposals (issue 32 item 3, docs/adr/0085): a merge into a world whose protection asks
 * for approvals stops at PROPOSED with its plan; owners other than its author approve it; a write
 * to the target or the source after the plan read them sends it back for a new plan (approvals
 * void, the merge says why); it applies only with the approvals of its current plan. Against the
 * real PostgreSQL, Redis and Kafka, through the services' own APIs.
 */

interface Proposal extends Merge {
  phase: string;
  actor: string;
  parts: { service: string; state: string }[];
  round: number;
  sentBack: { round: number; reason: string; at: string } | null;
  proposal: {
    requiredApprovals: number;
    approvals: { by: string; at: string }[];
    requiredChecks: string[];
    checks: {
      state: string;
      ranAt: string | null;
      results: { rule: string; fired: { type: string; pk: string }[]; firedCount: number; errors: string[] }[];
    } | null;
  };
}

describe('merge proposals', () => {
  let s: IntelligenceStack;
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    s = await intelligenceStack(MERGE_STACK);
  }, 120_000);
  afterAll(async () => s?.close());

  const { put, patch, get, fork, merge: start } = mergeCalls(() => s);
  const read = async (world: string, id: string) =>
    (await s.controlCall('GET', `/v1/worlds/${world}/merges/${id}`)).json() as Proposal;
  const waitFor = (world: string, id: string, what: string, ok: (m: Proposal) => boolean) =>
    s.until(
      `merge ${id}: ${what}`,
      async () => {
        const m = await read(world, id);
        return ok(m) ? m : undefined;
      },
      60_000,
    );
  const proposed = (world: string, id: string, round = 0) =>
    waitFor(world, id, `PROPOSED, round ${round}`, (m) => {
      if (['MERGED', 'FAILED', 'COMPENSATED', 'CONFLICTS'].includes(m.status)) {
        throw new Error(`merge ${id} ended ${m.status}: ${JSON.stringify(m)}`);
      }
      return m.status === 'PROPOSED' && m.phase === 'proposed' && m.round >= round;
    });
  const approve = (world: string, id: string, who?: string) =>
    s.controlCall('POST', `/v1/worlds/${world}/merges/${id}/approve`, who ? { token: tokens[who] } : {});
  const approvalRows = async (id: string) =>
    (
      await s.control.app.pg.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM merge_approvals WHERE merge_id = $1',
        [id],
      )
    ).rows[0]?.n;

  it('stops at PROPOSED; refuses bad approvals, writing nothing; a write to the source voids the approvals; applies once approved', async () => {
    await s.world('pr1', { objectTypes: { Customer } });
    await put('pr1', 'c1', { id: 'c1', name: 'one', tier: 'bronze', creditLimit: 100 });
    await fork('pr1-dev', 'pr1');
    for (const [user, role] of [
      ['olive', 'owner'],
      ['oscar', 'owner'],
      ['otto', 'owner'],
      ['ed', 'editor'],
    ] as const) {
      tokens[user] = await s.user(user, 'pr1', role);
    }
    const protect = await s.controlCall('PUT', '/v1/worlds/pr1/protection', {
      body: { requireMerge: false, requiredApprovals: 2 },
    });
    expect(protect.statusCode, protect.body).toBe(200);

    await patch('pr1-dev', 'c1', { tier: 'gold' });
    await put('pr1-dev', 'c2', { id: 'c2', name: 'two', tier: 'silver', creditLimit: 50 });
    const id = await start('pr1', { source: 'pr1-dev', strategy: 'SOURCE_WINS' });
    const first = await proposed('pr1', id);
    expect(first).toMatchObject({
      actor: 'admin',
      round: 0,
      sentBack: null,
      proposal: { requiredApprovals: 2, approvals: [] },
    });
    expect(first.parts.map((p) => p.state)).toEqual(['planned', 'planned']);
    // Nothing applied while it waits.
    expect(await get('pr1', 'c1')).toMatchObject({ tier: 'bronze' });
    expect(await get('pr1', 'c2')).toBeNull();
    const listed = (await s.controlCall('GET', '/v1/worlds/pr1/merges')).json().merges as Proposal[];
    expect(listed.find((m) => m.id === id)).toMatchObject({ status: 'PROPOSED', round: 0 });

    // Bad approvals: the author (rule requiredApprovals), a non-owner, an unknown merge.
    const own = expectProblem(await approve('pr1', id), 403);
    expect(own.rule).toBe('requiredApprovals');
    expect(own.detail).toContain("other than the merge's author");
    expectProblem(await approve('pr1', id, 'ed'), 403);
    expect(expectProblem(await approve('pr1', '0190f0e0-0000-7000-8000-000000000000', 'oscar'), 404).detail).toContain(
      'has no merge',
    );
    expect(await approvalRows(id)).toBe(0);

    const one = await approve('pr1', id, 'oscar');
    expect(one.statusCode, one.body).toBe(200);
    expect(one.json()).toEqual({ id, status: 'PROPOSED', approvals: 1, requiredApprovals: 2 });
    const twice = expectProblem(await approve('pr1', id, 'oscar'), 409);
    expect(twice.errors).toEqual([{ path: '/approver', message: 'has approved this plan already' }]);
    expect(await approvalRows(id)).toBe(1);
    expect((await read('pr1', id)).proposal.approvals.map((a) => a.by)).toEqual(['oscar']);

    // A write to the source after the plan read it: sent back for a new plan, the approval void.
    await patch('pr1-dev', 'c2', { creditLimit: 75 });
    const again = await proposed('pr1', id, 1);
    expect(again.sentBack?.round).toBe(1);
    expect(again.sentBack?.reason).toContain('the source pr1-dev was written after the plan read it');
    expect(again.proposal.approvals).toEqual([]);
    expect(await get('pr1', 'c2')).toBeNull();

    const a = await approve('pr1', id, 'oscar');
    expect(a.statusCode, a.body).toBe(200);
    const b = await approve('pr1', id, 'otto');
    expect(b.statusCode, b.body).toBe(202);
    expect(b.json()).toMatchObject({ id, status: 'RUNNING', approvals: 2, requiredApprovals: 2 });
    const done = await waitFor('pr1', id, 'MERGED', (m) => ['MERGED', 'FAILED', 'COMPENSATED'].includes(m.status));
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    // The new plan applied: the later write to the source is in.
    expect(await get('pr1', 'c1')).toMatchObject({ tier: 'gold' });
    expect(await get('pr1', 'c2')).toMatchObject({ creditLimit: 75 });

    // Approving a merge that is not PROPOSED: 409 naming the status, nothing written.
    const late = expectProblem(await approve('pr1', id, 'olive'), 409);
    expect(late.errors).toEqual([{ path: '/status', message: 'must be PROPOSED, not MERGED' }]);
    expect(await approvalRows(id)).toBe(3);
  }, 240_000);

  it('a write to the target after an approval sends the proposal back; it applies only with the new plan approved', async () => {
    await put('pr1-dev', 'c3', { id: 'c3', name: 'three', tier: 'bronze', creditLimit: 150 });
    const id = await start('pr1', { source: 'pr1-dev', strategy: 'SOURCE_WINS' });
    await proposed('pr1', id);
    expect((await approve('pr1', id, 'oscar')).statusCode).toBe(200);

    await put('pr1', 'c9', { id: 'c9', name: 'nine', tier: 'bronze', creditLimit: 1 });
    const back = await proposed('pr1', id, 1);
    expect(back.sentBack?.reason).toContain('the target pr1 was written after the plan read it');
    expect(back.proposal.approvals).toEqual([]);
    expect(await get('pr1', 'c3')).toBeNull();

    // One approval of the new plan is not enough.
    expect((await approve('pr1', id, 'otto')).json()).toMatchObject({ status: 'PROPOSED', approvals: 1 });
    expect((await read('pr1', id)).status).toBe('PROPOSED');
    expect((await approve('pr1', id, 'olive')).statusCode).toBe(202);
    const done = await waitFor('pr1', id, 'MERGED', (m) => ['MERGED', 'FAILED', 'COMPENSATED'].includes(m.status));
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    expect(await get('pr1', 'c3')).toMatchObject({ creditLimit: 150 });
    expect(await get('pr1', 'c9')).toMatchObject({ name: 'nine' });
  }, 240_000);

  it('required checks: a rule that fires on an object the merge brings in holds it; fixed in the source, the new plan passes and applies', async () => {
    await s.world('pc1', { objectTypes: { Customer } });
    const rule = await s.intelCall('PUT', '/v1/worlds/pc1/rules/bigCredit', {
      body: {
        objectType: 'Customer',
        condition: 'self.creditLimit > 100',
        alertType: 'big-credit',
        severity: 'warning',
      },
    });
    expect(rule.statusCode, rule.body).toBe(201);
    await put('pc1', 'k1', { id: 'k1', name: 'one', tier: 'bronze', creditLimit: 10 });
    await fork('pc1-dev', 'pc1');
    tokens.pia = await s.user('pia', 'pc1', 'owner');
    // control learns the world's rules from intelligence.rules.changed: until then the name is refused.
    await s.until('protection with the check', async () => {
      const res = await s.controlCall('PUT', '/v1/worlds/pc1/protection', {
        body: { requireMerge: true, requiredApprovals: 1, requiredChecks: ['bigCredit'] },
      });
      return res.statusCode === 200 ? true : undefined;
    });
    await s.until('requireMerge in data', async () =>
      (await s.dataCall('PUT', '/v1/worlds/pc1/objects/Customer/x', { body: { properties: { id: 'x' } } }))
        .statusCode === 403
        ? true
        : undefined,
    );

    await put('pc1-dev', 'k5', { id: 'k5', name: 'five', tier: 'gold', creditLimit: 500 });
    await put('pc1-dev', 'k6', { id: 'k6', name: 'six', tier: 'gold', creditLimit: 50 });
    const id = await start('pc1', { source: 'pc1-dev', strategy: 'SOURCE_WINS' });
    await proposed('pc1', id);
    const failed = await waitFor('pc1', id, 'checks failed', (m) => m.proposal.checks?.state === 'failed');
    expect(failed.proposal.requiredChecks).toEqual(['bigCredit']);
    expect(failed.proposal.checks?.results).toEqual([
      { rule: 'bigCredit', fired: [{ type: 'Customer', pk: 'k5' }], firedCount: 1, errors: [] },
    ]);
    // Approved, but the check failed: it does not apply.
    const approved = await approve('pc1', id, 'pia');
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json()).toMatchObject({ status: 'PROPOSED', approvals: 1, requiredApprovals: 1 });
    expect(await get('pc1', 'k5')).toBeNull();

    // Fixed in the source: the proposal is planned again, its approval void, and its checks run again.
    await patch('pc1-dev', 'k5', { creditLimit: 90 });
    const again = await proposed('pc1', id, 1);
    expect(again.sentBack?.reason).toContain('the source pc1-dev was written after the plan read it');
    expect(again.proposal.approvals).toEqual([]);
    const passed = await waitFor('pc1', id, 'checks passed', (m) => m.proposal.checks?.state === 'passed');
    expect(passed.status).toBe('PROPOSED');
    expect(passed.proposal.checks?.results).toEqual([{ rule: 'bigCredit', fired: [], firedCount: 0, errors: [] }]);
    expect(await get('pc1', 'k5')).toBeNull();

    const b = await approve('pc1', id, 'pia');
    expect(b.statusCode, b.body).toBe(202);
    const done = await waitFor('pc1', id, 'MERGED', (m) => ['MERGED', 'FAILED', 'COMPENSATED'].includes(m.status));
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    expect(await get('pc1', 'k5')).toMatchObject({ creditLimit: 90 });
    expect(await get('pc1', 'k6')).toMatchObject({ creditLimit: 50 });
  }, 240_000);

  it('checks asked for while a proposal waits run at its next approval; passing, it applies with the approvals in', async () => {
    const rule = await s.intelCall('PUT', '/v1/worlds/pr1/rules/tiny', {
      body: { objectType: 'Customer', condition: 'self.creditLimit < 0', alertType: 'tiny', severity: 'info' },
    });
    expect(rule.statusCode, rule.body).toBe(201);
    await put('pr1-dev', 'c4', { id: 'c4', name: 'four', tier: 'bronze', creditLimit: 40 });
    const id = await start('pr1', { source: 'pr1-dev', strategy: 'SOURCE_WINS' });
    const waiting = await proposed('pr1', id);
    expect(waiting.proposal.checks).toBeNull();
    await s.until('protection with the check', async () => {
      const res = await s.controlCall('PUT', '/v1/worlds/pr1/protection', {
        body: { requireMerge: false, requiredApprovals: 1, requiredChecks: ['tiny'] },
      });
      return res.statusCode === 200 ? true : undefined;
    });
    // The approval is in, the checks start; once they pass, the merge applies by itself.
    const approved = await approve('pr1', id, 'oscar');
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json()).toMatchObject({ status: 'PROPOSED', approvals: 1, requiredApprovals: 1 });
    const done = await waitFor('pr1', id, 'MERGED', (m) => ['MERGED', 'FAILED', 'COMPENSATED'].includes(m.status));
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    expect(done.proposal.checks).toMatchObject({
      state: 'passed',
      results: [{ rule: 'tiny', fired: [], firedCount: 0, errors: [] }],
    });
    expect(await get('pr1', 'c4')).toMatchObject({ creditLimit: 40 });
  }, 120_000);

  it('a dry run into a protected world is no proposal; an unprotected world merges at once', async () => {
    const dry = await start('pr1', { source: 'pr1-dev', strategy: 'SOURCE_WINS', dryRun: true });
    const m = await waitFor('pr1', dry, 'settled', (x) => ['MERGED', 'CONFLICTS', 'FAILED'].includes(x.status));
    expect(m.status).toBe('MERGED');
    expect(m.proposal).toEqual({ requiredApprovals: 0, approvals: [], requiredChecks: [], checks: null });
    expectProblem(await approve('pr1', dry, 'oscar'), 409);
  }, 120_000);
});

import { newEvent } from '@onto/shared';
import { createTestTopics, eventually, type TestService, testEndpoints } from '@onto/shared/testing';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AuditRecord, storeAuditRecords } from '../src/audit/repository.js';
import { controlService, expectProblem } from './control-service.js';

/**
 * GET /v1/audit (docs/adr/0084): control's own writes reach its read model through onto.audit and
 * the control-audit consumer; filters, paging, who may read, and what is refused.
 */

describe('the audit trail in control', () => {
  let service: TestService<unknown>;
  let admin: string;
  let ann: string;
  let bob: string;
  const requests: AuditRecord[] = [];

  const call = (method: 'GET' | 'POST' | 'PUT', url: string, token: string | undefined, body?: unknown) =>
    service.app.inject({
      method,
      url,
      headers: token ? { authorization: `Bearer ${token}` } : {},
      ...(body === undefined ? {} : { payload: body as object }),
    });
  const requestId = (res: LightMyRequestResponse) => String(res.headers['x-request-id']);
  const exchange = async (apiToken: string) => {
    const res = await call('POST', '/v1/auth/token', undefined, { apiToken });
    expect(res.statusCode, res.body).toBe(200);
    return { access: res.json().accessToken as string, requestId: requestId(res) };
  };
  const audit = async (query: string, token = admin) => {
    const res = await call('GET', `/v1/audit${query}`, token);
    expect(res.statusCode, res.body).toBe(200);
    return res.json() as { records: AuditRecord[]; nextPageToken: string | null };
  };
  /** The record of one request, once control has consumed it. */
  const recordOf = (id: string) =>
    eventually(`the audit record of request ${id}`, async () => {
      const { records } = await audit(`?requestId=${id}`);
      return records.length > 0 ? records : undefined;
    });

  beforeAll(async () => {
    const topics = await createTestTopics(testEndpoints().kafkaBrokers, 3);
    ({ service, admin } = await controlService({
      ONTO_TOPIC_PREFIX: topics.prefix,
      WORLD_PROVISION_TIMEOUT_MS: '600000',
    }));
    const write = async (method: 'POST' | 'PUT', url: string, token: string, body: unknown) => {
      const res = await call(method, url, token, body);
      expect(res.statusCode, res.body).toBeLessThan(300);
      return res;
    };
    await write('POST', '/v1/users', admin, { id: 'ann' });
    await write('POST', '/v1/users', admin, { id: 'bob' });
    const annToken = (await write('POST', '/v1/users/ann/tokens', admin, { name: 't' })).json().token as string;
    const bobToken = (await write('POST', '/v1/users/bob/tokens', admin, { name: 't' })).json().token as string;
    const first = await exchange(annToken);
    // ann creates a world, and owns it; admin another.
    await write('POST', '/v1/worlds', first.access, { id: 'aud-a' });
    await write('POST', '/v1/worlds', admin, { id: 'aud-b' });
    await write('PUT', '/v1/worlds/aud-a/members/bob', admin, { role: 'viewer' });
    // Tokens carry the roles held when they were exchanged.
    const second = await exchange(annToken);
    ann = second.access;
    bob = (await exchange(bobToken)).access;
    requests.push(...(await recordOf(second.requestId)));
  }, 120_000);
  afterAll(async () => service?.close());

  it('records each write once, with who, which token, what and its result', async () => {
    const all = await audit('?pageSize=1000');
    const ids = all.records.map((r) => r.requestId);
    expect(new Set(ids).size).toBe(ids.length);
    const made = all.records.find((r) => r.action === 'world.create' && r.world === 'aud-a');
    expect(made).toMatchObject({ service: 'control', actor: 'ann', target: null, result: 'accepted' });
    expect(made?.tokenId).toEqual(expect.any(String));
    // The exchange names the access token it issued: the one ann's later requests carry.
    const exchanged = requests[0];
    expect(exchanged).toMatchObject({ action: 'identity.token.exchange', actor: 'ann', world: null });
    const claims = JSON.parse(Buffer.from(ann.split('.')[1] ?? '', 'base64url').toString());
    expect(exchanged?.tokenId).toBe(claims.jti);
    // Newest first.
    const times = all.records.map((r) => Date.parse(r.recordedAt));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
  });

  it('records no refused request: its transaction, and its record, were rolled back', async () => {
    const refused = await call('POST', '/v1/users', admin, { id: 'ann' });
    expect(refused.statusCode).toBe(409);
    const forbidden = await call('PUT', '/v1/worlds/aud-b/members/bob', ann, { role: 'owner' });
    expect(forbidden.statusCode).toBe(403);
    // A later record of no world reaches the trail after theirs would have (one key, `*`, one order).
    const later = await call('POST', '/v1/users', admin, { id: 'cy' });
    expect(later.statusCode, later.body).toBe(201);
    await recordOf(requestId(later));
    for (const res of [refused, forbidden]) expect((await audit(`?requestId=${requestId(res)}`)).records).toEqual([]);
  });

  it('filters by world, actor, action and time, and pages', async () => {
    const inA = await audit('?world=aud-a');
    expect(inA.records.map((r) => r.action).sort()).toEqual(['identity.member.put', 'world.create']);
    expect((await audit('?actor=ann')).records.every((r) => r.actor === 'ann')).toBe(true);
    expect((await audit('?actor=ann')).records.map((r) => r.action)).toContain('world.create');
    const creations = await audit('?action=world.create');
    expect(creations.records.map((r) => r.world).sort()).toEqual(['aud-a', 'aud-b']);
    const both = await audit('?action=world.create&world=aud-b');
    expect(both.records.map((r) => r.actor)).toEqual(['admin']);

    const all = (await audit('?pageSize=1000')).records;
    const middle = all[Math.floor(all.length / 2)] as AuditRecord;
    const from = (await audit(`?from=${encodeURIComponent(middle.recordedAt)}&pageSize=1000`)).records;
    const to = (await audit(`?to=${encodeURIComponent(middle.recordedAt)}&pageSize=1000`)).records;
    expect(from.every((r) => r.recordedAt >= middle.recordedAt)).toBe(true);
    expect(to.every((r) => r.recordedAt < middle.recordedAt)).toBe(true);
    expect(from.length + to.length).toBe(all.length);

    // Pages of 2 walk the same records in the same order, and end.
    const paged: AuditRecord[] = [];
    let token: string | null = null;
    do {
      const page: { records: AuditRecord[]; nextPageToken: string | null } = await audit(
        `?pageSize=2${token ? `&pageToken=${encodeURIComponent(token)}` : ''}`,
      );
      expect(page.records.length).toBeLessThanOrEqual(2);
      paged.push(...page.records);
      token = page.nextPageToken;
    } while (token);
    expect(paged.map((r) => r.eventId)).toEqual(all.map((r) => r.eventId));
  });

  it('lets administrators read every world, owners their world, and nobody else', async () => {
    expect((await audit('?world=aud-a', ann)).records.length).toBe(2);
    expectProblem(await call('GET', '/v1/audit', ann), 403);
    expectProblem(await call('GET', '/v1/audit?world=aud-b', ann), 403);
    expectProblem(await call('GET', '/v1/audit?world=aud-a', bob), 403);
    expectProblem(await call('GET', '/v1/audit?world=aud-a', undefined), 401);
    expect((await audit('?world=aud-b')).records.length).toBe(1);
  });

  it('refuses bad filters with a 400 naming the field', async () => {
    const refused = async (query: string, field: string) => {
      const problem = expectProblem(await call('GET', `/v1/audit${query}`, admin), 400);
      expect(problem.errors.map((e: { path: string }) => e.path)).toContain(`querystring/${field}`);
    };
    await refused('?world=Not_A_World', 'world');
    await refused('?action=nodot', 'action');
    await refused('?from=yesterday', 'from');
    await refused('?to=2026-13-01T00:00:00Z', 'to');
    await refused('?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z', 'to');
    await refused('?pageSize=0', 'pageSize');
    await refused('?pageSize=1001', 'pageSize');
    await refused('?pageToken=not-a-token', 'pageToken');
    await refused(`?pageToken=${Buffer.from('{"a":"x","e":"y"}').toString('base64url')}`, 'pageToken');
    expectProblem(await call('GET', '/v1/audit?who=ann', admin), 400);
  });

  it('stores an event delivered twice once', async () => {
    const event = newEvent({
      type: 'audit.recorded',
      worldId: 'aud-a',
      key: 'aud-a',
      version: 1,
      producer: 'data',
      producerSeq: 0,
      payload: {
        actor: 'ann',
        tokenId: null,
        world: 'aud-a',
        action: 'object.put',
        target: 'Order/o-1',
        requestId: 'twice',
        result: 'created',
        beforeVersion: null,
        afterVersion: 1,
        detail: {},
      },
    });
    const received = { event, message: { topic: 'onto.audit', partition: 0, offset: '0', key: null, headers: {} } };
    for (let i = 0; i < 2; i++) {
      for (const statement of storeAuditRecords([received as never])) {
        await service.app.pg.query(statement.text, [...(statement.values ?? [])]);
      }
    }
    expect((await audit('?requestId=twice')).records).toMatchObject([
      { eventId: event.event_id, service: 'data', action: 'object.put', afterVersion: 1, beforeVersion: null },
    ]);
  });
});

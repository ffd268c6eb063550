import { describe, expect, it } from 'vitest';
import { AUDIT_RETENTION_DAYS, platformTopics } from '../src/kafka/topics.js';
import { auditMessage } from '../src/outbox/audit.js';

/** onto.audit (docs/adr/0084): its retention, its key, and the record a request makes. */
describe('the audit topic and record', () => {
  const DAY_MS = 86_400_000;
  const configOf = (topics: ReturnType<typeof platformTopics>, name: string) =>
    topics.find((t) => t.name === name)?.config;

  it('keeps records a year unless told, and only onto.audit has a retention of its own', () => {
    expect(AUDIT_RETENTION_DAYS).toBe(365);
    const topics = platformTopics('p.', 3);
    expect(configOf(topics, 'p.onto.audit')).toEqual({ 'retention.ms': String(365 * DAY_MS) });
    expect(configOf(platformTopics('p.', 3, 30), 'p.onto.audit')).toEqual({ 'retention.ms': String(30 * DAY_MS) });
    expect(topics.filter((t) => t.config).map((t) => t.name)).toEqual(['p.onto.audit']);
    expect(configOf(topics, 'p.onto.audit.dlq')).toBeUndefined();
  });

  const request = (principal: { userId: string; tokenId: string } | null) => ({
    id: 'req-1',
    principal,
    server: { serviceName: 'data' as const, topicPrefix: '' },
  });

  it("keys a world's records by the world and the others by *, with the request's principal and token", () => {
    const inWorld = auditMessage(request({ userId: 'ann', tokenId: 'jti-1' }), {
      action: 'object.put',
      result: 'updated',
      worldId: 'shop',
      subject: 'Order/o-1',
      beforeVersion: 1,
      afterVersion: 2,
    });
    expect(inWorld.key).toBe('shop');
    expect(inWorld.event).toMatchObject({ type: 'audit.recorded', world_id: 'shop', producer: 'data', version: 2 });
    expect(inWorld.event.payload).toEqual({
      actor: 'ann',
      tokenId: 'jti-1',
      world: 'shop',
      action: 'object.put',
      target: 'Order/o-1',
      requestId: 'req-1',
      result: 'updated',
      beforeVersion: 1,
      afterVersion: 2,
      detail: {},
    });
    const platform = auditMessage(request(null), {
      action: 'identity.token.exchange',
      result: 'created',
      actor: 'bob',
      tokenId: 'jti-2',
    });
    expect(platform.key).toBe('*');
    expect(platform.event).toMatchObject({ world_id: '*', payload: { actor: 'bob', tokenId: 'jti-2', world: null } });
  });

  it('refuses an action that is not <what>.<verb>', () => {
    expect(() => auditMessage(request(null), { action: 'Put', result: 'created' })).toThrow(/action/);
  });
});

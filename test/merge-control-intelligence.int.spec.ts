import { newEvent, type Producer } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/**
 * A merge across control and the real intelligence (issue 17, docs/adr/0037): control's saga and
 * intelligence's part talk over Kafka as in production. data's part is not in this branch yet:
 * FAKE DATA below publishes data's replies (merge.planned, merge.applied, merge.verified) by hand.
 */

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, limit: { type: 'integer' } },
};

describe('a merge through control with the real intelligence', () => {
  let s: IntelligenceStack;
  let producer: Producer;

  beforeAll(async () => {
    s = await intelligenceStack({});
    producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    await s.world('origin', { objectTypes: { Customer } });
  }, 120_000);
  afterAll(async () => {
    await producer?.disconnect();
    await s?.close();
  });

  // ------------------------------------------------------------ FAKE DATA
  const fromData = async (type: string, world: string, payload: Record<string, unknown>) => {
    const event = newEvent({
      type: type as 'merge.planned',
      worldId: world,
      key: world,
      version: 0,
      producer: 'data',
      producerSeq: 0,
      payload: { service: 'data', ...payload },
    });
    await producer.send([
      { topic: `${s.prefix}onto.storage`, messages: [{ key: world, value: JSON.stringify(event) }] },
    ]);
  };
  // ------------------------------------------------------------ end of the fake

  const merge = async (id: string) => (await s.controlCall('GET', `/v1/worlds/origin/merges/${id}`)).json();
  const until = (id: string, status: string, phase: string) =>
    s.until(
      `merge ${id} ${status}/${phase}`,
      async () => {
        const m = await merge(id);
        return m.status === status && m.phase === phase ? m : undefined;
      },
      30_000,
    );

  it('takes a derived property added in a fork back into its base, and verifies it', async () => {
    const fork = await s.controlCall('POST', '/v1/worlds', { body: { id: 'branch', from: { world: 'origin' } } });
    expect(fork.statusCode, fork.body).toBe(202);
    await s.until('branch READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/branch')).json().status === 'READY' ? true : undefined,
    );
    const put = await s.intelCall('PUT', '/v1/worlds/branch/derived-properties/double', {
      body: { objectType: 'Customer', expression: 'self.limit * 2' },
    });
    expect(put.statusCode, put.body).toBeLessThan(300);

    const started = await s.controlCall('POST', '/v1/worlds/origin/merges', {
      body: { source: 'branch', strategy: 'SOURCE_WINS' },
    });
    expect(started.statusCode, started.body).toBe(202);
    const id = started.json().id as string;
    const planned = await s.until(
      "intelligence's plan",
      async () => {
        const m = await merge(id);
        return m.parts.some((p: { service: string }) => p.service === 'intelligence') ? m : undefined;
      },
      30_000,
    );
    // The base is the fork point, intelligence's position included (intelligence.world.provisioned {base}).
    expect(planned.base).toMatchObject({ world: 'origin' });
    expect(planned.parts[0]).toMatchObject({ service: 'intelligence', state: 'planned', changes: { derived: 1 } });

    await fromData('merge.planned', 'origin', { merge: id, source: 5, target: 4, changes: {}, conflicts: 0 });
    await until(id, 'RUNNING', 'applying');
    await fromData('merge.applied', 'origin', { merge: id, target: 6, applied: {} });
    const merged = await until(id, 'MERGED', 'done');
    expect(merged.result.dataSeq).toBe(6);
    expect(merged.result.definitions).toBeGreaterThan(0);
    const inOrigin = await s.intelCall('GET', '/v1/worlds/origin/derived-properties/double');
    expect(inOrigin.statusCode, inOrigin.body).toBe(200);
    expect(inOrigin.json().expression).toBe('self.limit * 2');

    const verify = await s.controlCall('POST', `/v1/admin/worlds/origin/merges/${id}/verify`);
    expect(verify.statusCode, verify.body).toBe(202);
    await fromData('merge.verified', 'origin', {
      merge: id,
      verification: verify.json().id,
      checked: 0,
      differences: 0,
      sample: [],
    });
    const verified = await s.until(
      'the verification complete',
      async () => {
        const v = (await s.controlCall('GET', `/v1/admin/worlds/origin/merges/${id}/verify`)).json();
        return v.complete ? v : undefined;
      },
      30_000,
    );
    expect(verified).toMatchObject({ differences: 0, services: { intelligence: { differences: 0 } } });
    expect(verified.services.intelligence.checked).toBeGreaterThan(0);
  });
});

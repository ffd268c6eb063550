import { expect } from 'vitest';
import type { IntelligenceStack } from '../services/intelligence/test/stack.js';

/** What the cross-service merge specs share: a Customer type and the calls that drive a merge. */

/** The stack's settings: intelligence waits long for causes, merges have a minute per phase. */
export const MERGE_STACK = {
  intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' },
  controlEnv: { MERGE_TIMEOUT_MS: '60000' },
};

export const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string' },
    tier: { type: 'string' },
    creditLimit: { type: 'integer' },
  },
};

export interface Conflict {
  id: string;
  type: string;
  entity: Record<string, unknown>;
  base: unknown;
  source: unknown;
  target: unknown;
  resolution?: unknown;
}
export interface Merge {
  id: string;
  status: string;
  source: string;
  target: string;
  strategy: string;
  reverts: string | null;
  conflicts: Conflict[];
  failure?: { status: number; reason: string } | null;
}

/** Customers written through data, forks and merges through control, on the stack (made in beforeAll). */
export function mergeCalls(stack: () => IntelligenceStack) {
  const customer = (world: string, pk: string) => `/v1/worlds/${world}/objects/Customer/${pk}`;
  const put = async (world: string, pk: string, properties: Record<string, unknown>) => {
    const res = await stack().dataCall('PUT', customer(world, pk), { body: { properties } });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  const patch = async (world: string, pk: string, properties: Record<string, unknown>) => {
    const res = await stack().dataCall('PATCH', customer(world, pk), { body: { properties } });
    expect(res.statusCode, res.body).toBe(200);
  };
  const remove = async (world: string, pk: string) => {
    const res = await stack().dataCall('DELETE', customer(world, pk));
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  const get = async (world: string, pk: string) => {
    const res = await stack().dataCall('GET', customer(world, pk));
    return res.statusCode === 200 ? (res.json().properties as Record<string, unknown>) : null;
  };
  const ready = (id: string) =>
    stack().until(`${id} READY`, async () =>
      (await stack().controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
    );
  const fork = async (id: string, from: string) => {
    await ready(from); // s.world waits for data and intelligence; control says READY a moment later
    const res = await stack().controlCall('POST', '/v1/worlds', { body: { id, from: { world: from } } });
    expect(res.statusCode, res.body).toBe(202);
    await ready(id);
  };
  const merge = async (target: string, body: Record<string, unknown>) => {
    const res = await stack().controlCall('POST', `/v1/worlds/${target}/merges`, { body });
    expect(res.statusCode, res.body).toBe(202);
    return res.json().id as string;
  };
  const settled = (target: string, id: string, statuses = ['MERGED', 'CONFLICTS', 'FAILED', 'COMPENSATED']) =>
    stack().until(
      `merge ${id} settled`,
      async () => {
        const m = (await stack().controlCall('GET', `/v1/worlds/${target}/merges/${id}`)).json() as Merge;
        return statuses.includes(m.status) ? m : undefined;
      },
      60_000,
    );
  return { put, patch, remove, get, fork, merge, settled };
}

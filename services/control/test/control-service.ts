import { buildTestService, type TestService } from '@onto/shared/testing';
import type { LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import * as control from '../src/app.js';
import { ConfigSchema } from '../src/config.js';

export const BOOTSTRAP = 'control-test-bootstrap-token-0123456789';

/** control on a test database of its own, and the access token of its bootstrap admin. */
export async function controlService(env: Record<string, string>) {
  const service = (await buildTestService(
    { schema: ConfigSchema, app: control.default, migrations: control.migrations } as never,
    { ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP, ...env },
  )) as TestService<unknown>;
  const login = await service.app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken: BOOTSTRAP } });
  return { service, admin: login.json().accessToken as string };
}

/** A problem+json answer with this status; returns its body. */
export function expectProblem(res: LightMyRequestResponse, status: number) {
  expect(res.statusCode, res.body).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
  return res.json();
}

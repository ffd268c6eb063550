import { BODY_LIMITS } from '@onto/shared';
import { buildTestService } from '@onto/shared/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as control from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import { controlService, expectProblem } from './control-service.js';

describe('body limits', () => {
  let c: Awaited<ReturnType<typeof controlService>>;
  beforeAll(async () => {
    c = await controlService({});
  });
  afterAll(async () => c?.service.close());

  it("refuse a body over its route's own limit with 413 problem+json", async () => {
    const apiToken = 'x'.repeat(BODY_LIMITS.small);
    const res = await c.service.app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken } });
    expectProblem(res, 413);
    // A schema type may be larger than a token exchange: the same body is read there (and refused for what it says).
    const schema = await c.service.app.inject({
      method: 'PUT',
      url: '/v1/worlds/nowhere/object-types/Big',
      headers: { authorization: `Bearer ${c.admin}` },
      payload: { displayName: 'x'.repeat(BODY_LIMITS.small) },
    });
    expect(schema.statusCode).not.toBe(413);
    const over = await c.service.app.inject({
      method: 'PUT',
      url: '/v1/worlds/nowhere/object-types/Big',
      headers: { authorization: `Bearer ${c.admin}` },
      payload: { displayName: 'x'.repeat(BODY_LIMITS.schema) },
    });
    expectProblem(over, 413);
  });

  it('are named by every route with a body: one without fails at boot', async () => {
    const withUnlimitedRoute = async (app: FastifyInstance, opts: { config: never }) => {
      await app.register(control.default, opts);
      app.post('/v1/unlimited', { config: { public: true } }, async () => ({}));
    };
    await expect(
      buildTestService({ schema: ConfigSchema, app: withUnlimitedRoute, migrations: control.migrations } as never, {
        ONTO_BOOTSTRAP_TOKEN: 'body-limits-test-bootstrap-0123456789abcdef',
      }),
    ).rejects.toThrow(/POST \/v1\/unlimited has no bodyLimit/);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlService, expectProblem } from './control-service.js';

// Counts live in the shared Redis for a minute: every run uses addresses and tokens of its own.
const run = Math.floor(Math.random() * 250);
const address = (net: number, host: number) => `10.${run}.${net}.${host}`;
const token = (name: string) => `${name}-${run}-${Date.now()}`;

describe('the token exchange under a flood', () => {
  let c: Awaited<ReturnType<typeof controlService>>;
  const exchange = (remoteAddress: string, payload: unknown) =>
    c.service.app.inject({ method: 'POST', url: '/v1/auth/token', remoteAddress, payload: payload as object });

  beforeAll(async () => {
    c = await controlService({ TOKEN_EXCHANGES_PER_MINUTE_PER_IP: '6', TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN: '3' });
  });
  afterAll(async () => c?.service.close());

  const expectLimited = (res: Awaited<ReturnType<typeof exchange>>, what: RegExp) => {
    const problem = expectProblem(res, 429);
    expect(problem.detail).toMatch(what);
    const retryAfter = Number(res.headers['retry-after']);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
  };

  it('answers 429 with Retry-After past the limit of one API token, from any address', async () => {
    const guessed = token('guessed');
    const statuses = [];
    for (const i of [1, 2, 3]) statuses.push((await exchange(address(1, i), { apiToken: guessed })).statusCode);
    expect(statuses).toEqual([401, 401, 401]);
    expectLimited(await exchange(address(1, 4), { apiToken: guessed }), /with one API token/);
    // Counted in Redis, where every replica of control counts.
    const keys = await c.service.app.redis.keys('onto-control:*:token-exchange:*token:*');
    expect(keys.length).toBeGreaterThanOrEqual(1);
    // Another token is counted on its own.
    expect((await exchange(address(1, 5), { apiToken: token('another') })).statusCode).toBe(401);
  });

  it('answers 429 with Retry-After past the limit of one address, before reading the body', async () => {
    const statuses = [];
    for (const i of [1, 2, 3, 4, 5, 6])
      statuses.push((await exchange(address(2, 1), { apiToken: token(`guess-${i}`) })).statusCode);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 401]);
    expectLimited(await exchange(address(2, 1), { apiToken: token('guess-7') }), /from one address/);
    // Refused before the body is parsed: an invalid body is a 429 too, not a 400.
    expectLimited(await exchange(address(2, 1), { nonsense: true }), /from one address/);
    // Another address is not limited by it.
    expect((await exchange(address(2, 2), { apiToken: token('guess-8') })).statusCode).toBe(401);
  });
});

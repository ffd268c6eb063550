import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { actorOf } from '../src/auth/plugin.js';
import { BadRequest, problemResponses, Unavailable } from '../src/errors/problem.js';
import { awaitApplied } from '../src/http/consistency.js';
import { ifMatch, requestHeader } from '../src/http/headers.js';

const request = (headers: Record<string, string>, principal?: { userId: string }) =>
  ({ headers, principal }) as unknown as FastifyRequest;

const OBJECT = { what: 'an object version', any: true, min: 1, maxDigits: 15 } as const;
const SCHEMA = { what: 'a schema version', any: false, min: 0, maxDigits: 9 } as const;

describe('ifMatch', () => {
  it('reads a quoted, bare or weak version, and * where the rule accepts it', () => {
    expect(ifMatch(request({ 'if-match': '"3"' }), OBJECT)).toBe(3);
    expect(ifMatch(request({ 'if-match': ' 17 ' }), OBJECT)).toBe(17);
    expect(ifMatch(request({ 'if-match': 'W/"4"' }), OBJECT)).toBe(4);
    expect(ifMatch(request({ 'if-match': '*' }), OBJECT)).toBe('any');
    expect(ifMatch(request({ 'if-match': '"999999999999999"' }), OBJECT)).toBe(999_999_999_999_999);
    expect(ifMatch(request({}), OBJECT)).toBeUndefined();
    expect(ifMatch(request({ 'if-match': '"0"' }), SCHEMA)).toBe(0);
  });

  it('refuses with a 400 naming the header what the rule does not allow', () => {
    const refused = [
      [{ 'if-match': 'yesterday' }, OBJECT],
      [{ 'if-match': '"0"' }, OBJECT],
      [{ 'if-match': '"03"' }, OBJECT],
      [{ 'if-match': '"-1"' }, OBJECT],
      [{ 'if-match': '"1234567890123456"' }, OBJECT],
      [{ 'if-match': '*' }, SCHEMA],
      [{ 'if-match': '"1234567890"' }, SCHEMA],
    ] as const;
    for (const [headers, rule] of refused) {
      let error: unknown;
      try {
        // ifMatch's overloads each take one kind of rule: narrow the row's to it.
        if (rule.any) ifMatch(request(headers), rule);
        else ifMatch(request(headers), rule);
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(headers)).toBeInstanceOf(BadRequest);
      expect((error as BadRequest).extensions.errors?.[0]?.path).toBe('header/if-match');
      expect((error as BadRequest).detail).toContain(rule.what);
    }
  });
});

describe('requestHeader and actorOf', () => {
  it('trims a header and tells an absent one apart', () => {
    expect(requestHeader(request({ 'x-caused-by': '  id ' }), 'x-caused-by')).toBe('id');
    expect(requestHeader(request({}), 'x-caused-by')).toBeUndefined();
  });

  it("names the principal's user, else anonymous", () => {
    expect(actorOf(request({}, { userId: 'ada' }))).toBe('ada');
    expect(actorOf(request({}))).toBe('anonymous');
  });
});

describe('problemResponses', () => {
  it('maps each status to the shared Problem schema', () => {
    expect(problemResponses(400, 404, 503)).toEqual({
      400: { $ref: 'Problem#' },
      404: { $ref: 'Problem#' },
      503: { $ref: 'Problem#' },
    });
  });
});

describe('awaitApplied', () => {
  it('polls until the probe reaches the wanted value and answers it', async () => {
    const seen = [1, 2, 5];
    const have = await awaitApplied(
      async () => seen.shift() ?? 5,
      4,
      { boundMs: 5000, poll: { initialMs: 1, maxMs: 2 } },
      () => 'behind',
    );
    expect(have).toBe(5);
    expect(seen).toEqual([]);
  });

  it('gives up after the bound with a 503 saying what is behind', async () => {
    const started = Date.now();
    const error = await awaitApplied(
      async () => 2,
      3,
      { boundMs: 60, poll: { initialMs: 5, maxMs: 20 } },
      (have) => `at ${have}`,
    ).catch((e: unknown) => e);
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
    expect(error).toBeInstanceOf(Unavailable);
    expect((error as Unavailable).detail).toBe('at 2');
    expect((error as Unavailable).headers['retry-after']).toBe('1');
  });
});

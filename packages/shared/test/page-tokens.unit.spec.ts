import { describe, expect, it } from 'vitest';
import { PageTokens } from '../src/http/object-sets.js';

// Page tokens of object-set queries live QUERY_TOKEN_TTL_SECONDS (docs/adr/0072): retention keeps
// their commit that long, and a token older than that is refused with 410.
describe('page tokens', () => {
  const tokens = new PageTokens(Buffer.alloc(32, 7), 60_000);
  const issued = Date.parse('2026-12-03T12:00:00Z');
  const token = tokens.sign({ q: 'q1', c: 42, k: ['a'], t: issued });

  it('open while alive', () => {
    expect(tokens.open(token, 'q1', issued + 59_999)).toEqual({ c: 42, k: ['a'] });
  });

  it('410 naming body/pageToken once expired', () => {
    try {
      tokens.open(token, 'q1', issued + 60_000);
      expect.unreachable();
    } catch (err) {
      expect(err).toMatchObject({ status: 410, extensions: { errors: [{ path: 'body/pageToken' }] } });
    }
  });

  it('400 for another query, an altered token or one without its issue time', () => {
    expect(() => tokens.open(token, 'q2', issued)).toThrow(/another query/);
    expect(() => tokens.open(`${token}x`, 'q1', issued)).toThrow(/altered/);
    const untimed = tokens.sign({ q: 'q1', c: 42, k: [] } as never);
    expect(() => tokens.open(untimed, 'q1', issued)).toThrow(/malformed/);
  });
});

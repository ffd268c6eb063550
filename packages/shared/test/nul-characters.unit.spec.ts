import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { nulCharacterPath, refuseNulCharacters } from '../src/http/nul-characters.js';
import { installProblemHandlers } from '../src/http/problem.js';

describe('NUL characters, which PostgreSQL stores in neither text nor jsonb', () => {
  it('are found in strings and keys at any depth, as a JSON pointer', () => {
    expect(nulCharacterPath({ a: [{ 'b/c': 'x\u0000' }] }, 'body')).toBe('body/a/0/b~1c');
    expect(nulCharacterPath({ 'k\u0000': 1 }, 'body')).toBe('body/k\u0000');
    expect(nulCharacterPath({ a: ['fine', 1, null, { é: '日本' }] }, 'body')).toBeUndefined();
    let deep: unknown = 'bottom\u0000';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(nulCharacterPath(deep, '')).toMatch(/^(\/0){100000}$/);
  });

  it('are refused with a 400 problem naming the field, before the handler runs', async () => {
    const app = Fastify();
    installProblemHandlers(app);
    app.addHook('preValidation', refuseNulCharacters);
    let handled = 0;
    app.post('/things/:name', async () => ({ handled: ++handled }));
    const res = await app.inject({ method: 'POST', url: '/things/a?q=%00', payload: { name: 'n\u0000' } });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({
      status: 400,
      errors: [
        { path: 'body/name', message: expect.stringContaining('NUL') },
        { path: 'querystring/q', message: expect.stringContaining('NUL') },
      ],
    });
    const ok = await app.inject({ method: 'POST', url: '/things/a?q=1', payload: { name: 'n' } });
    expect(ok.json()).toEqual({ handled: 1 });
    await app.close();
  });
});

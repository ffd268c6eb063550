import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { installProblemHandlers } from '@onto/shared';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import consoleFiles from '../src/console/plugin.js';

/** control's /console: the built files, config.json, and a 503 problem when there is no build. */
async function serving(dir: string, urls: { dataUrl?: string; intelligenceUrl?: string } = {}) {
  const app = Fastify();
  installProblemHandlers(app);
  await app.register(consoleFiles, { dir, ...urls });
  await app.ready();
  return app;
}

describe('the console files', () => {
  it('answers 503 problem+json saying how to build it when there is no build', async () => {
    const app = await serving(join(tmpdir(), 'onto-console-missing'));
    const res = await app.inject({ url: '/console/' });
    expect(res.statusCode).toBe(503);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json()).toMatchObject({ title: 'Console Not Built', status: 503 });
    expect(res.json().detail).toContain('pnpm run build');
    await app.close();
  });

  it('serves the build with its types, never a file outside it, and config.json', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'onto-console-'));
    writeFileSync(join(dir, 'index.html'), '<!doctype html><title>c</title>');
    writeFileSync(join(dir, 'app.js'), 'export {}');
    const app = await serving(dir);
    expect((await app.inject({ url: '/console' })).headers.location).toBe('/console/');
    const index = await app.inject({ url: '/console/' });
    expect(index.statusCode).toBe(200);
    expect(index.headers['content-type']).toContain('text/html');
    expect((await app.inject({ url: '/console/app.js' })).headers['content-type']).toContain('text/javascript');
    expect((await app.inject({ url: '/console/other.js' })).statusCode).toBe(404);
    expect((await app.inject({ url: '/console/..%2f..%2fetc%2fpasswd' })).statusCode).toBe(404);
    // A sibling folder whose name starts with the build's: outside it all the same.
    const sibling = `${dir}-old`;
    mkdirSync(sibling);
    writeFileSync(join(sibling, 'app.js'), 'secret');
    expect((await app.inject({ url: `/console/..%2f${basename(sibling)}%2fapp.js` })).statusCode).toBe(404);
    // By default data and intelligence are this host on their ports.
    const config = await app.inject({ url: '/console/config.json', headers: { host: 'onto.example:4001' } });
    expect(config.json()).toEqual({ dataUrl: 'http://onto.example:4002', intelligenceUrl: 'http://onto.example:4003' });
    await app.close();
    const configured = await serving(dir, {
      dataUrl: 'https://data.example',
      intelligenceUrl: 'https://intel.example',
    });
    expect((await configured.inject({ url: '/console/config.json' })).json()).toEqual({
      dataUrl: 'https://data.example',
      intelligenceUrl: 'https://intel.example',
    });
    await configured.close();
  });
});

import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../../../services/control/test/control-service.js';
import { type IntelligenceStack, intelligenceStack } from '../../../services/intelligence/test/stack.js';
import { runCli } from './cli.js';

/**
 * `onto-admin codegen --at <ref>` (issue 30 item 5): a schema version, or a tag of the world
 * resolved through control's tags API to the schema version it names.
 */
const W = 'codegen-at';
const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, name: { type: 'string' } },
};

describe('codegen at a ref', () => {
  let s: IntelligenceStack;
  let globals: string[];
  let out: string;
  let tagged: number;

  beforeAll(async () => {
    const pool = { DB_POOL_MAX: '5' };
    s = await intelligenceStack({ partitions: 1, controlEnv: pool, dataEnv: pool, intelligenceEnv: pool });
    const urls = await Promise.all(
      [s.control.app, s.data.app, s.intelligence?.app].map((app) =>
        (app as NonNullable<typeof app>).listen({ port: 0, host: '127.0.0.1' }),
      ),
    );
    await s.identityKnown();
    globals = [
      '--json',
      '--control-url',
      urls[0] as string,
      '--data-url',
      urls[1] as string,
      '--intelligence-url',
      urls[2] as string,
      '--api-token',
      BOOTSTRAP,
    ];
    out = await mkdtemp(join(tmpdir(), 'onto-codegen-at-'));
    tagged = await s.world(W, { objectTypes: { Customer } });
    const tag = await s.controlCall('PUT', `/v1/worlds/${W}/tags/release-1`, { body: {} });
    expect(tag.statusCode, tag.body).toBe(201);
    // The schema moves on after the tag: a new property.
    const moved = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/Customer`, {
      body: { ...Customer, properties: { ...Customer.properties, email: { type: 'string' } } },
    });
    expect(moved.statusCode, moved.body).toBe(200);
    expect(moved.json().version).toBeGreaterThan(tagged);
  }, 180_000);
  afterAll(async () => {
    await s?.close();
    if (out) await rm(out, { recursive: true, force: true });
  });

  const codegen = (...args: string[]) => runCli(globals, 'codegen', '--world', W, '--out', out, ...args);
  const generated = () => readFile(join(out, `${W}.ts`), 'utf8');

  it('generates from the schema version a tag names, from a version, and from the current schema', async () => {
    const atTag = await codegen('--at', 'release-1');
    expect(atTag.code, atTag.err).toBe(0);
    expect(atTag.json()).toMatchObject({ world: W, schemaVersion: tagged });
    const module = await generated();
    expect(module).toContain(`export const schemaVersion = ${tagged};`);
    expect(module).not.toContain('email');

    const atVersion = await codegen('--at', String(tagged));
    expect(atVersion.code, atVersion.err).toBe(0);
    expect(await generated()).toBe(module);

    const now = await codegen();
    expect(now.code, now.err).toBe(0);
    expect(now.json().schemaVersion).toBeGreaterThan(tagged);
    expect(await generated()).toContain('email');
  }, 60_000);

  it('refuses a tag the world does not have, and a ref of no shape, writing nothing', async () => {
    await rm(join(out, `${W}.ts`), { force: true });
    const missing = await codegen('--at', 'no-such-tag');
    expect(missing.code).not.toBe(0);
    expect(missing.err).toMatch(/no tag no-such-tag|404/);
    const malformed = await codegen('--at', 'not a ref');
    expect(malformed.code).not.toBe(0);
    expect(malformed.err).toMatch(/schema version .* or a tag name/);
    const zero = await codegen('--at', '0');
    expect(zero.code).not.toBe(0);
    await expect(readFile(join(out, `${W}.ts`), 'utf8')).rejects.toThrow();
  }, 60_000);
});

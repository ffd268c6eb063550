import { connect } from 'node:net';
import { CAUSED_BY_PATTERN, JSON_MAX_DEPTH, TOO_DEEP } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

/** One request written byte for byte to a listening app; the raw answer. */
async function raw(app: FastifyInstance, request: Buffer): Promise<string> {
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('the app is not listening');
  return new Promise((resolve, reject) => {
    const socket = connect(address.port, '127.0.0.1', () => socket.end(request));
    const chunks: Buffer[] = [];
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

const O = { displayName: 'O', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const JSON_BODY = { 'content-type': 'application/json' };
/** Arrays nested `depth` deep, as the fuzzer sent them (20,000 answered 500 before the limit). */
const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

// What an independent fuzzer found (issue 19), each as the request it sent.
describe('the fuzzer’s findings', () => {
  let s: IntelligenceStack;
  const W = 'fuzzed';

  beforeAll(async () => {
    s = await intelligenceStack({
      controlEnv: { MAX_OBJECT_TYPES_PER_WORLD: '3', MAX_INDEXED_PROPERTIES_PER_WORLD: '1' },
      intelligenceEnv: { MAX_DEFINITIONS_PER_WORLD: '2' },
    });
    await s.world(W, { objectTypes: { O } });
  }, 120_000);
  afterAll(async () => s?.close());

  it('JavaScript property names are names like any other in control’s schema', async () => {
    const type = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/constructor`, {
      body: { displayName: 'c', primaryKey: 'valueOf', properties: { valueOf: { type: 'string', required: true } } },
    });
    expect(type.statusCode, type.body).toBe(200);
    expect(type.json().changes).toEqual([{ path: '/objectTypes/constructor', change: 'added', breaking: false }]);
    const link = await s.controlCall('PUT', `/v1/worlds/${W}/link-types/valueOf`, {
      body: { from: 'O', to: 'constructor', cardinality: 'ONE_TO_MANY' },
    });
    expect(link.statusCode, link.body).toBe(200);
    const unknownLink = await s.controlCall('PUT', `/v1/worlds/${W}/link-types/toString`, {
      body: { from: 'O', to: 'hasOwnProperty', cardinality: 'ONE_TO_MANY' },
    });
    expect(expectProblem(unknownLink, 422).errors).toEqual([
      { path: '/to', message: 'object type "hasOwnProperty" does not exist' },
    ]);
    const missing = await s.controlCall('DELETE', `/v1/worlds/${W}/action-types/valueOf`);
    // An unknown type is a 404, as the document says (docs/adr/0049), whatever its name.
    expect(expectProblem(missing, 404).detail).toBe('action type valueOf does not exist in fuzzed');
  });

  it('takes an action parameter named like a prototype member for absent when the request leaves it out', async () => {
    // Found by the lint of plain-object keys: the natural key read parameters.constructor, the
    // Object function, and failed to write it as JSON (a 500).
    await s.world('keyed', {
      objectTypes: { O },
      actionTypes: {
        make: {
          parameters: { id: { type: 'string', required: true }, constructor: { type: 'string' } },
          edits: [{ op: 'createObject', objectType: 'O', pk: { param: 'id' }, values: {} }],
          idempotencyKey: ['constructor'],
        },
      },
    });
    const res = await s.intelCall('POST', '/v1/worlds/keyed/actions/make', {
      body: { parameters: { id: 'o-1' } },
      headers: { 'idempotency-key': 'k-constructor' },
    });
    expect(res.statusCode, res.body).toBe(202);
  });

  it('refuses an action request that leaves out a required parameter named like a prototype member', async () => {
    // Found by the lint once a guard had to name its key: `input.constructor` read Object, present.
    await s.world('required', {
      objectTypes: { O },
      actionTypes: {
        make: {
          parameters: { id: { type: 'string', required: true }, constructor: { type: 'string', required: true } },
          edits: [{ op: 'createObject', objectType: 'O', pk: { param: 'id' }, values: {} }],
        },
      },
    });
    const res = await s.intelCall('POST', '/v1/worlds/required/actions/make', {
      body: { parameters: { id: 'o-1' } },
      headers: { 'idempotency-key': 'k-required-constructor' },
    });
    expect(expectProblem(res, 422).errors).toEqual([{ path: '/parameters/constructor', message: 'is required' }]);
  });

  it('holds each world to its quotas of definitions, object types and indexed properties', async () => {
    const Q = 'quotas';
    await s.world(Q, { objectTypes: { O } });
    const indexed = (name: string) => ({
      displayName: name,
      primaryKey: 'id',
      properties: { id: { type: 'string', required: true }, n: { type: 'integer', indexed: true } },
    });
    expect((await s.controlCall('PUT', `/v1/worlds/${Q}/object-types/A`, { body: indexed('A') })).statusCode).toBe(200);
    const secondIndex = await s.controlCall('PUT', `/v1/worlds/${Q}/object-types/B`, { body: indexed('B') });
    expect(expectProblem(secondIndex, 422).errors[0].message).toMatch(/MAX_INDEXED_PROPERTIES_PER_WORLD/);
    expect((await s.controlCall('PUT', `/v1/worlds/${Q}/object-types/B`, { body: O })).statusCode).toBe(200);
    const fourth = await s.controlCall('PUT', `/v1/worlds/${Q}/object-types/C`, { body: O });
    expect(expectProblem(fourth, 422).errors[0].message).toMatch(/at most 3 \(MAX_OBJECT_TYPES_PER_WORLD\)/);
    // Changing a type that exists adds none: allowed at the quota.
    expect(
      (await s.controlCall('PUT', `/v1/worlds/${Q}/object-types/B`, { body: { ...O, displayName: 'B' } })).statusCode,
    ).toBe(200);

    await s.until(`schema of ${Q} in intelligence`, async () => {
      const res = await s.intelCall('PUT', `/v1/worlds/${Q}/derived-properties/d1`, {
        body: { objectType: 'B', expression: '1' },
      });
      return res.statusCode === 201 ? true : undefined;
    });
    const put = (name: string) =>
      s.intelCall('PUT', `/v1/worlds/${Q}/derived-properties/${name}`, { body: { objectType: 'B', expression: '2' } });
    expect((await put('d2')).statusCode).toBe(201);
    expect(expectProblem(await put('d3'), 422).errors).toEqual([
      { path: '/', message: 'a world may have at most 2 (MAX_DEFINITIONS_PER_WORLD)' },
    ]);
    expect((await put('d2')).statusCode).toBe(200);
    // Another kind has a quota of its own.
    const rule = await s.intelCall('PUT', `/v1/worlds/${Q}/rules/r1`, {
      body: { objectType: 'B', condition: 'true', alertType: 'always', severity: 'info' },
    });
    expect(rule.statusCode, rule.body).toBe(201);
  });

  it('bounds integer parameters in their schemas', async () => {
    const res = await s.controlCall('GET', `/v1/worlds/${W}/schema/history?before=2147483648`);
    expect(expectProblem(res, 400).detail).toMatch(/before/);
    const ok = await s.controlCall('GET', `/v1/worlds/${W}/schema/history?before=2147483647`);
    expect(ok.statusCode, ok.body).toBe(200);
  });

  it('grants roles only in worlds that exist', async () => {
    expect((await s.controlCall('POST', '/v1/users', { body: { id: 'fuzz-user' } })).statusCode).toBe(201);
    const res = await s.controlCall('PUT', '/v1/worlds/nowhere/members/fuzz-user', { body: { role: 'owner' } });
    expect(expectProblem(res, 404).detail).toBe('world nowhere does not exist');
    const { rowCount } = await s.control.app.pg.query('SELECT 1 FROM world_roles WHERE world_id = $1', ['nowhere']);
    expect(rowCount).toBe(0);
  });

  it('answers a consistency token for a world nobody has heard of with 404 at once', async () => {
    for (const [call, url, token] of [
      [s.intelCall, '/v1/worlds/nowhere/watermarks', 'data=5'],
      [s.intelCall, '/v1/worlds/nowhere/rules', 'control=3'],
      [s.dataCall, '/v1/worlds/nowhere/objects/O/x', 'control=3'],
    ] as const) {
      const started = Date.now();
      const res = await call('GET', url, { headers: { 'x-consistency-token': token } });
      expect(expectProblem(res, 404).detail, url).toMatch(/nowhere/);
      expect(Date.now() - started, url).toBeLessThan(1000);
    }
  });

  it('answers what Node’s parser refuses with problem+json: 431 for large headers, 400 for raw bytes in the path', async () => {
    const app = s.control.app;
    await app.listen({ port: 0, host: '127.0.0.1' });
    const large = await raw(
      app,
      Buffer.from(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`),
    );
    expect(large).toMatch(/^HTTP\/1\.1 431 /);
    expect(large).toMatch(/content-type: application\/problem\+json/i);
    expect(JSON.parse(large.slice(large.indexOf('\r\n\r\n') + 4))).toMatchObject({ status: 431 });
    const bytes = await raw(
      app,
      Buffer.concat([
        Buffer.from('GET /v1/worlds/'),
        Buffer.from([0xff, 0xfe]),
        Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n'),
      ]),
    );
    expect(bytes).toMatch(/^HTTP\/1\.1 400 /);
    expect(bytes).toMatch(/content-type: application\/problem\+json/i);
    expect(JSON.parse(bytes.slice(bytes.indexOf('\r\n\r\n') + 4))).toMatchObject({ status: 400 });
  });

  it('publishes OpenAPI documents that say what the servers do', async () => {
    type Operation = {
      parameters?: { in: string; name: string; required?: boolean; schema?: { format?: string; pattern?: string } }[];
      requestBody?: { content: Record<string, unknown> };
      responses: Record<string, { content?: Record<string, unknown> }>;
    };
    const docs = {
      control: (await s.control.app.inject({ method: 'GET', url: '/docs/json' })).json(),
      data: (await s.data.app.inject({ method: 'GET', url: '/docs/json' })).json(),
      intelligence: (await s.intelligence?.app.inject({ method: 'GET', url: '/docs/json' }))?.json(),
    };
    for (const [service, doc] of Object.entries(docs)) {
      for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>)) {
        for (const [method, op] of Object.entries(item)) {
          const where = `${service} ${method} ${path}`;
          for (const [status, response] of Object.entries(op.responses)) {
            if (Number(status) >= 400)
              expect(Object.keys(response.content ?? {}), `${where} ${status}`).toEqual(['application/problem+json']);
          }
          expect(Object.keys(op.responses), where).toEqual(expect.arrayContaining(['414', '431']));
          if (op.requestBody)
            expect(Object.keys(op.responses), where).toEqual(expect.arrayContaining(['400', '413', '415']));
          for (const p of op.parameters ?? []) {
            if (p.in === 'header' && p.name === 'x-caused-by') expect(p.schema?.pattern, where).toBe(CAUSED_BY_PATTERN);
          }
        }
      }
    }
    const run = docs.intelligence.paths['/v1/worlds/{world}/actions/{actionType}'].post as Operation;
    expect(run.parameters?.find((p) => p.name === 'idempotency-key')?.required).toBe(true);
    const bulk = docs.data.paths['/v1/worlds/{world}/bulk/{type}'].post as Operation;
    expect(Object.keys(bulk.requestBody?.content ?? {}).sort()).toEqual(['application/json', 'application/x-ndjson']);
    expect(bulk.responses['422']?.content?.['application/problem+json']).toBeDefined();
  });
  it('refuses JSON nested deeper than JSON_MAX_DEPTH with a 400 problem before any handler runs, in every service', async () => {
    const D = 'deep';
    await s.world(D, {
      objectTypes: { O },
      actionTypes: {
        make: {
          parameters: { id: { type: 'string', required: true } },
          edits: [{ op: 'createObject', objectType: 'O', pk: { param: 'id' }, values: {} }],
        },
      },
    });
    const tooDeep = (res: Parameters<typeof expectProblem>[0]) => {
      const problem = expectProblem(res, 400);
      expect(problem.errors).toEqual([{ path: '/', message: TOO_DEEP }]);
      expect(problem.detail).toMatch(/deeper than 64 levels/);
      return problem;
    };
    const deep = nested(20_000);

    // intelligence: an action's parameters, and a definition.
    tooDeep(
      await s.intelCall('POST', `/v1/worlds/${D}/actions/make`, {
        body: `{"parameters":{"id":${deep}}}`,
        headers: { ...JSON_BODY, 'idempotency-key': 'k-deep' },
      }),
    );
    const { rowCount: actions } =
      (await s.intelligence?.app.pg.query('SELECT 1 FROM actions WHERE world_id = $1', [D])) ?? {};
    expect(actions).toBe(0);
    tooDeep(
      await s.intelCall('PUT', `/v1/worlds/${D}/rules/r`, {
        body: `{"objectType":"O","condition":"true","alertType":"a","severity":"info","x":${deep}}`,
        headers: JSON_BODY,
      }),
    );

    // control: an action type; the schema keeps its version.
    const before = (await s.controlCall('GET', `/v1/worlds/${D}/schema`)).json();
    tooDeep(
      await s.controlCall('PUT', `/v1/worlds/${D}/action-types/deep`, {
        body: `{"parameters":{"p":${deep}},"edits":[]}`,
        headers: JSON_BODY,
      }),
    );
    const after = (await s.controlCall('GET', `/v1/worlds/${D}/schema`)).json();
    expect(after.version).toBe(before.version);
    expect(after.actionTypes.deep).toBeUndefined();

    // data: PUT, a merge patch, and a bulk line; nothing is stored.
    tooDeep(
      await s.dataCall('PUT', `/v1/worlds/${D}/objects/O/o-deep`, {
        body: `{"properties":{"id":"o-deep","x":${deep}}}`,
        headers: JSON_BODY,
      }),
    );
    tooDeep(
      await s.dataCall('PATCH', `/v1/worlds/${D}/objects/O/o-deep`, {
        body: `{"properties":{"x":${deep}}}`,
        headers: { 'content-type': 'application/merge-patch+json' },
      }),
    );
    const bulk = await s.dataCall('POST', `/v1/worlds/${D}/bulk/O`, {
      body: `{"properties":{"id":"b1"}}\n{"properties":{"id":"b2","x":${deep}}}\n`,
      headers: { 'content-type': 'application/x-ndjson' },
    });
    expect(expectProblem(bulk, 422).errors).toEqual([
      { line: 2, path: '', message: expect.stringMatching(/^is not JSON: nests arrays and objects deeper than 64/) },
    ]);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${D}/objects/O/o-deep`), 404);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${D}/objects/O/b1`), 404);

    // At the limit the body is parsed and judged on what it says: 64 levels reach the handler.
    const atLimit = await s.dataCall('PUT', `/v1/worlds/${D}/objects/O/o-limit`, {
      body: `{"properties":{"id":"o-limit","x":${nested(JSON_MAX_DEPTH - 2)}}}`,
      headers: JSON_BODY,
    });
    const problem = expectProblem(atLimit, 422);
    expect(problem.errors).toEqual([{ path: '/properties/x', message: expect.any(String) }]);
  });

  it('bounds the ids of a set-aside redrive in every service: 1e21 and 2^63 - 1 are a 400 naming the id', async () => {
    for (const [service, call] of [
      ['control', s.controlCall],
      ['data', s.dataCall],
      ['intelligence', s.intelCall],
    ] as const) {
      for (const id of ['1e21', '9223372036854775807', '9007199254740992']) {
        const res = await call('POST', '/v1/admin/outbox/set-aside/redrive', {
          body: `{"ids":[1,${id}]}`,
          headers: JSON_BODY,
        });
        const problem = expectProblem(res, 400);
        expect(problem.errors, `${service} ${id}`).toEqual([
          { path: 'body/ids/1', message: expect.stringMatching(/<= 9007199254740991/) },
        ]);
      }
      const ok = await call('POST', '/v1/admin/outbox/set-aside/redrive', {
        body: '{"ids":[9007199254740991]}',
        headers: JSON_BODY,
      });
      expect(ok.statusCode, `${service}: ${ok.body}`).toBe(200);
      expect(ok.json()).toEqual({ redriven: 0 });
    }
  });
});

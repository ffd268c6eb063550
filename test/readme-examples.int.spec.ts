import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../services/control/test/control-service.js';
import { type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/**
 * The README's API tour, pasted in order into one shell, as a new user would: after the demo that
 * `./onto up` runs, from a folder outside the checkout, with only the API token that `./onto up`
 * prints. Each `sh` block of "Using the API" and after runs as written, but for the services'
 * addresses (the test's own ports instead of 4001–4003). An HTTP error anywhere fails the run,
 * and the outputs the text promises are checked block by block.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DEMO = join(ROOT, 'scripts/demo.mjs');

/** The shell blocks of the README from its API tour on, each with the comment lines it holds. */
function tourBlocks(readme: string): string[] {
  const tour = readme.slice(readme.indexOf('\n## Using the API'));
  return [...tour.matchAll(/^```sh\n([\s\S]*?)^```$/gm)]
    .map((m) => m[1] as string)
    .filter((block) => !/^\s*(\.\/onto|docker|pnpm) /m.test(block));
}

describe('the README examples', () => {
  let s: IntelligenceStack;
  let urls: { control: string; data: string; intelligence: string };

  const run = async (file: string, env: Record<string, string>, timeout: number) => {
    try {
      const { stdout, stderr } = await promisify(execFile)(file.endsWith('.mjs') ? process.execPath : 'bash', [file], {
        env: { ...process.env, ...env },
        cwd: mkdtempSync(join(tmpdir(), 'onto-readme-')),
        timeout,
        maxBuffer: 64 * 1024 * 1024,
      });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const failed = err as { code?: number; stdout?: string; stderr?: string };
      return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
    }
  };

  beforeAll(async () => {
    const pool = { DB_POOL_MAX: '5' };
    s = await intelligenceStack({ partitions: 1, controlEnv: pool, dataEnv: pool, intelligenceEnv: pool });
    const [control, data, intelligence] = await Promise.all(
      [s.control.app, s.data.app, s.intelligence?.app].map((app) =>
        (app as NonNullable<typeof app>).listen({ port: 0, host: '127.0.0.1' }),
      ),
    );
    urls = { control: control as string, data: data as string, intelligence: intelligence as string };
    await s.identityKnown();
  }, 120_000);
  afterAll(async () => {
    await s?.close();
  });

  it('run in order in one shell after the demo, each answering what the text says', async () => {
    const demo = await run(
      DEMO,
      {
        ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
        ONTO_CONTROL_URL: urls.control,
        ONTO_DATA_URL: urls.data,
        ONTO_INTELLIGENCE_URL: urls.intelligence,
      },
      240_000,
    );
    expect(demo.code, `${demo.stdout}\n${demo.stderr}`).toBe(0);

    const blocks = tourBlocks(readFileSync(join(ROOT, 'README.md'), 'utf8'));
    expect(blocks.length).toBeGreaterThanOrEqual(5);
    const host = (url: string) => new URL(url).host;
    const script = [
      'set -eu',
      // An HTTP error is a failed example: curl exits non-zero (printing the problem) and the run stops.
      // (An example that already fails on errors with -f keeps its own flag: curl takes only one.)
      'curl() { case " $* " in *" -sf "* | *" -f "*) command curl "$@" ;; *) command curl --fail-with-body "$@" ;; esac; }',
      ...blocks.map((block, i) =>
        [`printf '\\n::block ${i}::\\n'`, block]
          .join('\n')
          .replaceAll('localhost:4001', host(urls.control))
          .replaceAll('localhost:4002', host(urls.data))
          .replaceAll('localhost:4003', host(urls.intelligence)),
      ),
      "printf '\\n::end::\\n'",
    ].join('\n');
    const file = join(mkdtempSync(join(tmpdir(), 'onto-readme-script-')), 'tour.sh');
    await import('node:fs/promises').then((fs) => fs.writeFile(file, script));
    const tour = await run(file, { ONTO_API_TOKEN: BOOTSTRAP }, 300_000);
    const outputs = tour.stdout.split(/\n::block \d+::\n/).slice(1);
    const failedAt = outputs.length - 1;
    expect(
      tour.code,
      `block ${failedAt} failed:\n${blocks[failedAt]}\n--- its output:\n${outputs.at(-1)}\n--- stderr:\n${tour.stderr}`,
    ).toBe(0);
    expect(tour.stdout).toContain('::end::');

    /** The output of the block that holds `marker`. */
    const outputOf = (marker: string) => {
      const i = blocks.findIndex((b) => b.includes(marker));
      expect(i, `no README block holds ${marker}`).toBeGreaterThanOrEqual(0);
      return outputs[i] as string;
    };
    // control: the world shop became READY and its schema history holds the Product type.
    expect(outputOf('{"id":"shop"}')).toContain('"path":"/objectTypes/Product"');
    // The MANUAL merge settled by a value: o-2's amount in demo is the value given.
    expect(outputOf('# Fork review from demo')).toMatch(/"amount":150\b/);
    // data: the conditional write answered a version, the tag completed, the read at the tag's
    // commit answers the order as it was then, before the change made after the tag.
    const data = outputOf('# Tag demo');
    expect(data).toMatch(/"status":"COMPLETE"/);
    const lastRead = data.slice(data.lastIndexOf('{"type":"Order","pk":"o-5"'));
    expect(JSON.parse(lastRead).properties.amount, lastRead).toBe(250);
    expect(outputOf('# An object (the primary key comes from the path)')).toMatch(/^etag: "1"/im);
    // intelligence: the read with data's token already sees the new amount, and the rule fired.
    const intelligence = outputOf('# Read your own write');
    expect(intelligence).toMatch(/"amount":2000\b/);
    expect(intelligence).toMatch(/"rule":"bigOrder"/);

    // What the examples wrote is where they say, read back through the API.
    const o2 = await s.dataCall('GET', '/v1/worlds/demo/objects/Order/o-2');
    expect(o2.json().properties.amount).toBe(150);
    const shipped = await s.dataCall('GET', '/v1/worlds/trial/objects/Order/o-5');
    expect(shipped.json().properties.status).toBe('shipped');
    const alerts = await s.intelCall('GET', '/v1/worlds/demo/alerts?rule=bigOrder&status=OPEN');
    expect(alerts.json().alerts.map((a: { pk: string }) => a.pk)).toContain('o-5');
  }, 600_000);

  /**
   * The OpenAPI documents' examples (issue 30), after the tour, on the same demo world: every
   * request example answers 2xx when sent as written to the path it names, and every example, of
   * a request or an answer, is valid against the schema beside it and has the fields the
   * service's real answer has.
   */
  it('every OpenAPI example of data and intelligence is valid and runs against the demo world', async () => {
    type Media = {
      schema?: object;
      examples?: Record<string, { value: unknown; 'x-path-parameters'?: Record<string, string> }>;
    };
    type Operation = {
      parameters?: { in: string; name: string }[];
      requestBody?: { content?: Record<string, Media> };
      responses?: Record<string, { content?: Record<string, Media> }>;
    };
    const ran: string[] = [];
    for (const service of ['data', 'intelligence'] as const) {
      const call = service === 'data' ? s.dataCall : s.intelCall;
      const doc = (await call('GET', '/docs/json')).json() as {
        paths: Record<string, Record<string, Operation>>;
        components?: { schemas?: Record<string, object> };
      };
      const ajv = addFormats.default(new Ajv({ strict: false, allErrors: true }));
      for (const [id, schema] of Object.entries(doc.components?.schemas ?? {}))
        ajv.addSchema(schema, `#/components/schemas/${id}`);
      const invalid = (schema: object | undefined, value: unknown) => {
        const validate = ajv.compile(schema ?? {});
        return validate(value) ? null : ajv.errorsText(validate.errors);
      };
      for (const [path, item] of Object.entries(doc.paths)) {
        for (const [method, op] of Object.entries(item)) {
          const where = `${service} ${method.toUpperCase()} ${path}`;
          const request = op.requestBody?.content?.['application/json'];
          let answer: Record<string, unknown> | undefined;
          for (const [name, example] of Object.entries(request?.examples ?? {})) {
            expect(invalid(request?.schema, example.value), `${where} example ${name}`).toBeNull();
            const url = path.replace(/\{(\w+)\}/g, (_, p: string) => {
              const value = example['x-path-parameters']?.[p] ?? (p === 'world' ? 'demo' : undefined);
              expect(value, `${where} example ${name} names no value for {${p}}`).toBeDefined();
              return encodeURIComponent(value as string);
            });
            const headers: Record<string, string> = {};
            if (op.parameters?.some((p) => p.in === 'header' && p.name === 'idempotency-key'))
              headers['idempotency-key'] = `example-${name}-${Date.now()}`;
            const res = await call(method.toUpperCase() as 'POST', url, { body: example.value, headers });
            expect(res.statusCode, `${where} example ${name}: ${res.body}`).toBeLessThan(300);
            answer ??= res.statusCode === 200 ? res.json() : undefined;
            ran.push(`${service} ${method.toUpperCase()} ${path} ${name}`);
          }
          for (const [status, response] of Object.entries(op.responses ?? {})) {
            const media = response.content?.['application/json'];
            for (const [name, example] of Object.entries(media?.examples ?? {})) {
              expect(invalid(media?.schema, example.value), `${where} ${status} example ${name}`).toBeNull();
              if (status === '200' && answer)
                expect(Object.keys(example.value as object).sort(), `${where} ${status} example ${name}`).toEqual(
                  Object.keys(answer).sort(),
                );
            }
          }
        }
      }
    }
    // The object-set and action endpoints of issue 30 have request examples that ran.
    for (const operation of [
      'data POST /v1/worlds/{world}/objects/{type}/query',
      'data POST /v1/worlds/{world}/objects/{type}/aggregate',
      'intelligence POST /v1/worlds/{world}/objects/{type}/query',
      'intelligence POST /v1/worlds/{world}/objects/{type}/aggregate',
      'intelligence POST /v1/worlds/{world}/actions/{actionType}',
      'intelligence POST /v1/worlds/{world}/actions/{actionType}/batch',
    ])
      expect(
        ran.some((r) => r.startsWith(`${operation} `)),
        `${operation} has no request example`,
      ).toBe(true);
  }, 120_000);
});

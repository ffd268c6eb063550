import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { afterAll, describe, expect, it } from 'vitest';
import {
  applyTraced,
  contextOfTraceparent,
  exportingWanted,
  FileSpanExporter,
  setTracingEnabled,
  startTracing,
  traceIdsOf,
  traceparentFor,
  traceparentOf,
  tracerOf,
} from '../src/index.js';

const exporter = new InMemorySpanExporter();
const processor = new SimpleSpanProcessor({ exporter });
const stop = await startTracing({ service: 'unit', spanProcessors: [processor] });
/** The spans ended so far (the processor exports them asynchronously). */
const finished = async () => {
  await processor.forceFlush();
  return exporter.getFinishedSpans();
};
afterAll(async () => stop?.());

const PARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const record = (eventId: string, traceparent?: string) => ({
  event: { event_id: eventId, type: 'object.updated', world_id: 'w' },
  message: { topic: 'onto.changes.objects', partition: 2, offset: '7', headers: traceparent ? { traceparent } : {} },
});

describe('exporting is off unless the OTEL_* variables ask for it', () => {
  it.each([
    [{}, false],
    [{ OTEL_TRACES_EXPORTER: 'none' }, false],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, true],
    [{ OTEL_TRACES_EXPORTER: 'console,none' }, true],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }, true],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'true' }, false],
  ])('%j → %s', (env, wanted) => {
    expect(exportingWanted(env)).toBe(wanted);
  });

  it('starts no SDK without them', async () => {
    expect(await startTracing({ service: 'x', env: {} })).toBeUndefined();
  });
});

describe('trace context', () => {
  it('reads a W3C traceparent; a malformed or missing one is the root context (a new trace)', () => {
    expect(traceparentOf(contextOfTraceparent(PARENT))).toBe(PARENT);
    for (const bad of [
      '00-not-a-trace-01',
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      'x',
      42,
      undefined,
    ]) {
      expect(trace.getSpan(contextOfTraceparent(bad))).toBeUndefined();
    }
  });

  it('applies records each in a consumer span under its own trace, and what they cause carries it on', async () => {
    exporter.reset();
    const seen = await applyTraced(
      tracerOf('unit'),
      'unit-consumer',
      [record('e-1', PARENT), record('e-2', '00-garbage'), record('e-3')],
      async () => ({
        byCause: traceparentFor('e-1'),
        byOtherCause: traceparentFor('e-2'),
        unknownCause: traceparentFor('e-9'),
        ids: traceIdsOf(),
      }),
    );
    const spans = await finished();
    // e-3 came without a traceparent (its producer does not trace): no span of its own.
    expect(spans.map((s) => [s.name, s.kind, s.attributes['messaging.message.id']])).toEqual([
      ['apply object.updated', SpanKind.CONSUMER, 'e-1'],
      ['apply object.updated', SpanKind.CONSUMER, 'e-2'],
    ]);
    const [first, second] = spans;
    expect(first?.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(first?.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    // The malformed header: a new trace, nothing failed.
    expect(second?.parentSpanContext).toBeUndefined();
    expect(second?.spanContext().traceId).not.toBe(first?.spanContext().traceId);
    expect(first?.attributes).toMatchObject({
      'messaging.destination.name': 'onto.changes.objects',
      'messaging.kafka.offset': 7,
      'messaging.message.id': 'e-1',
      'messaging.consumer.group.name': 'unit-consumer',
    });
    expect(seen.byCause).toBe(`00-${first?.spanContext().traceId}-${first?.spanContext().spanId}-01`);
    expect(seen.byOtherCause).toBe(`00-${second?.spanContext().traceId}-${second?.spanContext().spanId}-01`);
    // An event without a known cause: the first record's trace, as the active span.
    expect(seen.unknownCause).toBe(seen.byCause);
    expect(seen.ids).toEqual({ trace_id: first?.spanContext().traceId, span_id: first?.spanContext().spanId });
  });

  it('ends the spans with an error when the apply fails, and rethrows', async () => {
    exporter.reset();
    await expect(
      applyTraced(tracerOf('unit'), 'c', [record('e-1', PARENT)], async () => {
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect((await finished())[0]?.status).toMatchObject({ code: 2, message: 'refused' });
  });

  it('off: no span, no traceparent, the apply alone', async () => {
    setTracingEnabled(false);
    try {
      exporter.reset();
      const inside = await applyTraced(tracerOf('unit'), 'c', [record('e-1', PARENT)], async () => ({
        tp: traceparentFor('e-1'),
        active: trace.getSpan(context.active()),
      }));
      expect(inside).toEqual({ tp: undefined, active: undefined });
      expect(traceparentOf(contextOfTraceparent(PARENT))).toBeUndefined();
      expect(await finished()).toEqual([]);
    } finally {
      setTracingEnabled(true);
    }
  });
});

describe('ONTO_TRACES_FILE and scripts/traces.mjs', () => {
  it('writes a JSON line per span, which the script prints as a tree across services', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'onto-traces-'));
    exporter.reset();
    const server = tracerOf('data').startSpan('PUT /v1/worlds/:world/objects/:type/:pk', {
      kind: SpanKind.SERVER,
      attributes: { 'onto.request_id': 'req-1', 'http.response.status_code': 201 },
    });
    await applyTraced(
      tracerOf('intelligence'),
      'c',
      [record('e-1', traceparentOf(trace.setSpan(context.active(), server)))],
      async () => {},
    );
    server.end();
    const spans = await finished();
    const file = join(dir, 'all.jsonl');
    await new Promise<void>((resolve, reject) =>
      new FileSpanExporter(file).export(spans, (r) => (r.code === 0 ? resolve() : reject(r.error))),
    );
    const lines = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ name: 'apply object.updated', kind: 'CONSUMER', service: 'onto-intelligence' });
    const script = fileURLToPath(new URL('../../../scripts/traces.mjs', import.meta.url));
    const traceId = server.spanContext().traceId;
    const list = execFileSync(process.execPath, [script, dir], { encoding: 'utf8' });
    expect(list).toMatch(new RegExp(`${traceId} +2 spans .* PUT /v1/worlds/:world/objects/:type/:pk`));
    // By the request's x-request-id as well as by the trace id.
    const tree = execFileSync(process.execPath, [script, dir, 'req-1'], { encoding: 'utf8' });
    expect(tree.split('\n').slice(1, 3)).toEqual([
      expect.stringMatching(
        /^\+ +0\.0 ms +\d+\.\d ms {2}onto-data SERVER PUT \/v1\/worlds\/:world\/objects\/:type\/:pk {2}\(status 201\)$/,
      ),
      expect.stringMatching(
        /^\+ +\d+\.\d ms +\d+\.\d ms {4}onto-intelligence CONSUMER apply object\.updated {2}\(event e-1, offset 2@7\)$/,
      ),
    ]);
  });
});

import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type Attributes, SpanKind } from '@opentelemetry/api';
import { ExportResultCode, hrTimeToMicroseconds } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace';
import { setTracingEnabled } from './context.js';

/**
 * Whether the OTEL_* variables ask for spans to be exported: an OTLP endpoint, or
 * OTEL_TRACES_EXPORTER naming an exporter other than `none`. Off by default, unlike the SDK's own
 * default (otlp to localhost), so that a stack nobody collects from makes no spans at all;
 * OTEL_SDK_DISABLED=true wins.
 */
export function exportingWanted(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (exporters.length > 0) return exporters.some((e) => e !== 'none');
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** A span as one JSON line of ONTO_TRACES_FILE: what scripts/traces.mjs reads. */
export function spanLine(span: ReadableSpan): string {
  const { traceId, spanId } = span.spanContext();
  const attributes: Attributes = span.attributes;
  return JSON.stringify({
    traceId,
    spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? null,
    // The tracer's name says which service made the span, also where several share a process.
    service: span.instrumentationScope.name,
    resource: span.resource.attributes['service.name'],
    name: span.name,
    kind: SpanKind[span.kind],
    startUs: hrTimeToMicroseconds(span.startTime),
    durationUs: hrTimeToMicroseconds(span.duration),
    status: span.status.code === 2 ? 'ERROR' : 'OK',
    ...(span.status.message ? { statusMessage: span.status.message } : {}),
    attributes,
  });
}

/** Appends finished spans to a file, a JSON line each (`./onto up --tracing`). */
export class FileSpanExporter implements SpanExporter {
  constructor(private readonly path: string) {}

  export(spans: ReadableSpan[], done: (result: { code: ExportResultCode; error?: Error }) => void): void {
    try {
      appendFileSync(this.path, spans.map((s) => `${spanLine(s)}\n`).join(''));
      done({ code: ExportResultCode.SUCCESS });
    } catch (error) {
      done({ code: ExportResultCode.FAILED, error: error as Error });
    }
  }

  async shutdown(): Promise<void> {}
}

export interface TracingOptions {
  /** The service, whose name spans carry (`onto-<service>` unless OTEL_SERVICE_NAME says otherwise). */
  service: string;
  env?: NodeJS.ProcessEnv;
  /** A file the spans are appended to, a JSON line each, instead of the OTEL_* exporters. */
  file?: string | undefined;
  /** Processors of a test's own (an in-memory exporter), instead of any exporter. */
  spanProcessors?: SpanProcessor[];
}

/**
 * Starts OpenTelemetry's Node SDK when spans are to go somewhere (exportingWanted, a file, a
 * test's processors) and turns on the carrying of trace context; answers how to flush and stop
 * it, or undefined when tracing stays off. The SDK reads the standard variables itself: the
 * OTLP endpoint, protocol and headers, OTEL_TRACES_SAMPLER (parentbased_always_on by default),
 * OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES. The SDK's modules are loaded only then: a process
 * that does not trace (a service by default, onto-admin, a test) never loads them.
 */
export async function startTracing(options: TracingOptions): Promise<(() => Promise<void>) | undefined> {
  const env = options.env ?? process.env;
  if (!options.spanProcessors && !options.file && !exportingWanted(env)) return undefined;
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  const [{ NodeSDK }, { BatchSpanProcessor }, { PgInstrumentation }, { IORedisInstrumentation }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/instrumentation-pg'),
    import('@opentelemetry/instrumentation-ioredis'),
  ]);
  const processors =
    options.spanProcessors ??
    (options.file ? [new BatchSpanProcessor({ exporter: new FileSpanExporter(options.file) })] : undefined);
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME ?? `onto-${options.service}`,
    // Spans are made where onto knows what they mean (tracing/http.ts, the relay, the consumer,
    // docs/adr/0055); below them, a span per SQL statement and per Redis command, only inside a
    // span of onto's (a relay's poll or a pool's idle check starts no trace of its own).
    instrumentations: [
      new PgInstrumentation({ requireParentSpan: true }),
      new IORedisInstrumentation({ requireParentSpan: true }),
    ],
    ...(processors ? { spanProcessors: processors } : {}),
  });
  sdk.start();
  // The services import pg and ioredis (ES modules) before tracing starts; the instrumentations
  // hook CommonJS's require: requiring them once more here patches the very classes in use.
  const require = createRequire(import.meta.url);
  require('pg');
  require('ioredis');
  setTracingEnabled(true);
  return async () => {
    setTracingEnabled(false);
    await sdk.shutdown();
  };
}

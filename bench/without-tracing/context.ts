// The tracing baseline's context.ts (bench/without-tracing/make.sh): onto's trace-context API with
// nothing behind it and no OpenTelemetry module loaded, so `./onto bench tracing` can measure what
// the default build (tracing off) costs against a build without tracing.
import type { Context, Span, Tracer } from '@opentelemetry/api';

export function tracingEnabled(): boolean {
  return false;
}
export function setTracingEnabled(_on: boolean): void {}
export function tracerOf(_service: string): Tracer {
  return undefined as unknown as Tracer;
}
export function traceparentOf(_ctx?: Context): string | undefined {
  return undefined;
}
export function contextOfTraceparent(_traceparent: unknown): Context {
  throw new Error('this build has no tracing');
}
export function traceIdsOf(_ctx?: Context): { trace_id?: string; span_id?: string } {
  return {};
}
export const TRACED_LOGGER: unique symbol = Symbol('onto.traced-logger');
export function logMixin(_merge: object, _level: number, _logger: unknown): object {
  return {};
}
export function traceparentFor(_causedBy: string | null | undefined): string | undefined {
  return undefined;
}
export function endSpan(span: Span, _error?: unknown): void {
  span.end();
}
export interface TracedRecord {
  event: { event_id: string; type: string; world_id: string };
  message: { topic: string; partition: number; offset: string; headers: Record<string, string | undefined> };
}
export async function applyTraced<T>(
  _tracer: Tracer | undefined,
  _consumer: string,
  _records: readonly TracedRecord[],
  apply: () => Promise<T>,
): Promise<T> {
  return apply();
}

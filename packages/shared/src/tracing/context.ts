import {
  type Context,
  context,
  createContextKey,
  defaultTextMapGetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

/**
 * Trace context as onto carries it (docs/adr/0055): the W3C `traceparent` of a request, stored
 * with each outbox row its transaction writes, sent as the record's `traceparent` header (the
 * CloudEvents distributed-tracing extension) and continued by whoever applies the record. Off
 * unless startTracing turned it on: then nothing here creates a span or stores a header, and
 * every function costs a test of one boolean.
 */
let enabled = false;

/** Whether spans are made and trace context is carried (startTracing, or a test's own provider). */
export function tracingEnabled(): boolean {
  return enabled;
}

/** Turns the carrying of trace context on or off; startTracing calls it, and tests with their own provider. */
export function setTracingEnabled(on: boolean): void {
  enabled = on;
}

const w3c = new W3CTraceContextPropagator();

/** The tracer of a service's spans; its name says which service made them. */
export function tracerOf(service: string): Tracer {
  return trace.getTracer(`onto-${service}`);
}

/** The W3C traceparent of the span active in `ctx`, when there is a valid one and tracing is on. */
export function traceparentOf(ctx: Context = context.active()): string | undefined {
  if (!enabled) return undefined;
  const carrier: Record<string, string> = {};
  w3c.inject(ctx, carrier, { set: (c, k, v) => (c[k] = v) });
  return carrier.traceparent;
}

/**
 * The context a traceparent names (as a remote parent); a missing or malformed one is the root
 * context, so that a new trace starts rather than anything failing.
 */
export function contextOfTraceparent(traceparent: unknown): Context {
  if (typeof traceparent !== 'string') return ROOT_CONTEXT;
  return w3c.extract(ROOT_CONTEXT, { traceparent }, defaultTextMapGetter);
}

/** The trace and span ids of the span active in `ctx`, for log lines; empty when there is none. */
export function traceIdsOf(ctx: Context = context.active()): { trace_id?: string; span_id?: string } {
  const span = enabled ? trace.getSpan(ctx) : undefined;
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/** Marks a logger whose bindings name the trace already (a request's): logMixin adds nothing. */
export const TRACED_LOGGER: unique symbol = Symbol('onto.traced-logger');

/**
 * pino's mixin: `trace_id` and `span_id` of the active span on every line logged in its context
 * (a handler's, a consumer's apply), unless the logger names them already.
 */
export function logMixin(_merge: object, _level: number, logger: unknown): object {
  if ((logger as Record<symbol, unknown> | undefined)?.[TRACED_LOGGER]) return {};
  return traceIdsOf();
}

/** Causes being applied (event id → traceparent of its consumer span): see applyTraced. */
const CAUSES = createContextKey('onto.trace.causes');

/**
 * The traceparent an event written now carries on: that of the event it was caused by when that
 * one is being applied in this context, else that of the active span.
 */
export function traceparentFor(causedBy: string | null | undefined): string | undefined {
  if (!enabled) return undefined;
  const active = context.active();
  if (causedBy) {
    const causes = active.getValue(CAUSES) as Map<string, string> | undefined;
    const cause = causes?.get(causedBy);
    if (cause) return cause;
  }
  return traceparentOf(active);
}

/** Ends a span with an error status when `error` is given. */
export function endSpan(span: Span, error?: unknown): void {
  if (error !== undefined) {
    span.recordException(error instanceof Error ? error : String(error));
    span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  }
  span.end();
}

/** What applyTraced needs of a record being applied. */
export interface TracedRecord {
  event: { event_id: string; type: string; world_id: string };
  message: { topic: string; partition: number; offset: string; headers: Record<string, string | undefined> };
}

/**
 * Runs `apply` of records with a consumer span per record that carries a `traceparent` header,
 * each the child of the span it names (a malformed one starts a new trace; a record without one,
 * sent by a producer that does not trace or by no request, such as the periodic position
 * announcements, gets no span). Events written meanwhile carry on the trace of the record they
 * were caused by, else of the first traced record (traceparentFor). Without tracing, it only runs
 * `apply`.
 */
export async function applyTraced<T>(
  tracer: Tracer | undefined,
  consumer: string,
  records: readonly TracedRecord[],
  apply: () => Promise<T>,
): Promise<T> {
  if (!enabled || !tracer || records.length === 0) return apply();
  const spans: Span[] = [];
  const causes = new Map<string, string>();
  let first: Context | undefined;
  for (const { event, message } of records) {
    if (message.headers.traceparent === undefined) continue;
    const parent = contextOfTraceparent(message.headers.traceparent);
    const span = tracer.startSpan(
      `apply ${event.type}`,
      {
        kind: SpanKind.CONSUMER,
        attributes: {
          'messaging.system': 'kafka',
          'messaging.operation.type': 'process',
          'messaging.destination.name': message.topic,
          'messaging.destination.partition.id': String(message.partition),
          'messaging.kafka.offset': Number(message.offset),
          'messaging.consumer.group.name': consumer,
          'messaging.message.id': event.event_id,
          'onto.world': event.world_id,
        },
      },
      parent,
    );
    spans.push(span);
    const own = trace.setSpan(parent, span);
    first ??= own;
    const traceparent = traceparentOf(own);
    if (traceparent) causes.set(event.event_id, traceparent);
  }
  if (!first) return apply();
  let failure: unknown;
  try {
    return await context.with(first.setValue(CAUSES, causes), apply);
  } catch (error) {
    failure = error;
    throw error;
  } finally {
    for (const span of spans) endSpan(span, failure);
  }
}

// The tracing baseline's sdk.ts (bench/without-tracing/make.sh): no SDK, and no OpenTelemetry module loaded.
import type { ReadableSpan, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace';

export function exportingWanted(_env: NodeJS.ProcessEnv): boolean {
  return false;
}
export function spanLine(_span: ReadableSpan): string {
  throw new Error('this build has no tracing');
}
export class FileSpanExporter implements SpanExporter {
  constructor(_path: string) {}
  export(): void {
    throw new Error('this build has no tracing');
  }
  async shutdown(): Promise<void> {}
}
export interface TracingOptions {
  service: string;
  env?: NodeJS.ProcessEnv;
  file?: string | undefined;
  spanProcessors?: SpanProcessor[];
}
export async function startTracing(_options: TracingOptions): Promise<(() => Promise<void>) | undefined> {
  return undefined;
}

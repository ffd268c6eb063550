/**
 * Named examples for a route's body or answer in the OpenAPI document (issue 30). @fastify/swagger
 * moves a schema's `x-examples` to its media type's `examples` ({name: Example Object}), so the
 * examples sit beside the schema they illustrate rather than in the schema itself, where a
 * validator would read them. Each example says which path it is written for (the demo world of
 * `./onto up`): `x-path-parameters` fills the path's parameters, and test/readme-examples runs
 * every request example against that world.
 */
import { CloneType, type TSchema } from '@sinclair/typebox';

export interface Example {
  summary: string;
  value: unknown;
  /** The path parameters the example is written for (world is `demo` unless named). */
  path?: Record<string, string>;
}

export function withExamples<T extends TSchema>(schema: T, examples: Record<string, Example>): T {
  const named = Object.fromEntries(
    Object.entries(examples).map(([name, { summary, value, path }]) => [
      name,
      { summary, value, ...(path ? { 'x-path-parameters': path } : {}) },
    ]),
  );
  return CloneType(schema, { 'x-examples': named });
}

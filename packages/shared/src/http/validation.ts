import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchema, FastifySchemaCompiler } from 'fastify';

const common: Options = { allErrors: true, strict: false, useDefaults: true, removeAdditional: false };

// Bodies are validated exactly: a string is not a number and a boolean is not an integer, and
// unknown fields are refused by schemas that say additionalProperties: false. Query strings,
// path parameters and headers arrive as text, so they alone are coerced.
const bodyAjv = addFormats.default(new Ajv({ ...common, coerceTypes: false }));
const textAjv = addFormats.default(new Ajv({ ...common, coerceTypes: 'array' }));

export const validatorCompiler: FastifySchemaCompiler<FastifySchema> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? bodyAjv : textAjv).compile(schema as object);

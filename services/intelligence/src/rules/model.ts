/** Rules as pure rules: what a rule says and how it is checked against the schema. */
import type { FieldError, SchemaDocument } from '@onto/shared';
import { compile, missingProperties, type Program } from '../cel/expressions.js';
import type { Definition } from '../definitions.js';

export const SEVERITIES = ['info', 'warning', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];
export const ALERT_TYPE = '^[A-Za-z][A-Za-z0-9_.-]{0,127}$';

export interface RuleInput {
  objectType: string;
  condition: string;
  alertType: string;
  severity: Severity;
  description?: string | undefined;
}

export interface Rule extends RuleInput, Definition {}

export interface ResolvedRule {
  name: string;
  objectType: string;
  version: number;
  alertType: string;
  severity: Severity;
  program: Program;
  ownProperties: Set<string>;
  ownDerived: Set<string>;
}

/**
 * Checks a rule's condition against the object type's properties and derived properties (it
 * sees `self` and `derived`); returns every fault by JSON path, or the resolved rule.
 */
export function resolveRule(
  name: string,
  input: RuleInput,
  version: number,
  schema: SchemaDocument,
  derived: ReadonlyMap<string, { objectType: string; state: 'valid' | 'invalid' }>,
): { errors: FieldError[]; resolved?: ResolvedRule } {
  const errors: FieldError[] = [];
  const type = Object.hasOwn(schema.objectTypes, input.objectType) ? schema.objectTypes[input.objectType] : undefined;
  if (!type) {
    errors.push({ path: '/objectType', message: `object type ${input.objectType} is not in the world's schema` });
  }
  const compiled = compile(input.condition, ['self', 'derived']);
  if (!compiled.ok) {
    errors.push({ path: '/condition', message: compiled.message });
    return { errors };
  }
  errors.push(...missingProperties(compiled.refs, type, input.objectType, '/condition'));
  for (const d of compiled.refs.derived) {
    const def = derived.get(d);
    if (!def) errors.push({ path: '/condition', message: `derived.${d}: derived property ${d} is not defined` });
    else if (def.objectType !== input.objectType) {
      errors.push({
        path: '/condition',
        message: `derived.${d}: ${d} is on ${def.objectType}, not ${input.objectType}`,
      });
    } else if (def.state !== 'valid') {
      errors.push({ path: '/condition', message: `derived.${d}: derived property ${d} is invalid` });
    }
  }
  if (errors.length > 0) return { errors };
  return {
    errors,
    resolved: {
      name,
      objectType: input.objectType,
      version,
      alertType: input.alertType,
      severity: input.severity,
      program: compiled.program,
      ownProperties: compiled.refs.self,
      ownDerived: compiled.refs.derived,
    },
  };
}

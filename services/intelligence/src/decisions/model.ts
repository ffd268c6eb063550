/** Decision definitions as pure rules: what turns an alert into a proposed action. */
import { type FieldError, ownValue, type SchemaDocument } from '@onto/shared';
import { compile, missingProperties, type Program } from '../cel/expressions.js';
import type { Definition } from '../definitions.js';

export const APPROVALS = ['automatic', 'manual'] as const;
export type Approval = (typeof APPROVALS)[number];
export const DECISION_STATUSES = ['PENDING_APPROVAL', 'REJECTED', 'EXECUTED', 'FAILED'] as const;
export type DecisionStatus = (typeof DECISION_STATUSES)[number];

/** What `alert.<field>` offers a parameter expression. */
export const ALERT_FIELDS = ['id', 'rule', 'alertType', 'severity', 'objectType', 'pk', 'raisedAt'] as const;

export interface DecisionInput {
  /** The rule whose alerts this definition decides on … */
  rule?: string | undefined;
  /** … or every rule raising this alert type. */
  alertType?: string | undefined;
  actionType: string;
  /** CEL per action parameter, over the alert's object (`self`, `derived`) and `alert`. */
  parameters: Record<string, string>;
  approval: Approval;
  description?: string | undefined;
}

export interface DecisionDefinition extends DecisionInput, Definition {}

export interface ResolvedDecision {
  name: string;
  version: number;
  rule?: string | undefined;
  alertType?: string | undefined;
  actionType: string;
  approval: Approval;
  parameters: { name: string; program: Program }[];
}

/**
 * Checks a decision definition: the rule (or some rule of the alert type) exists, the action
 * type is in the schema, every parameter is one of the action type's and every required one is
 * given, each expression reads only what the alert's object type has.
 */
export function resolveDecision(
  name: string,
  input: DecisionInput,
  version: number,
  schema: SchemaDocument,
  rules: ReadonlyMap<string, { objectType: string; alertType: string; state: 'valid' | 'invalid' }>,
  derived: ReadonlyMap<string, { objectType: string; state: 'valid' | 'invalid' }>,
): { errors: FieldError[]; resolved?: ResolvedDecision } {
  const errors: FieldError[] = [];
  let objectTypes: string[] = [];
  if ((input.rule === undefined) === (input.alertType === undefined)) {
    errors.push({ path: '/rule', message: 'give exactly one of rule or alertType' });
  } else if (input.rule !== undefined) {
    const rule = rules.get(input.rule);
    if (!rule) errors.push({ path: '/rule', message: `rule ${input.rule} is not defined` });
    else if (rule.state !== 'valid') errors.push({ path: '/rule', message: `rule ${input.rule} is invalid` });
    else objectTypes = [rule.objectType];
  } else {
    objectTypes = [
      ...new Set(
        [...rules.values()]
          .filter((r) => r.alertType === input.alertType && r.state === 'valid')
          .map((r) => r.objectType),
      ),
    ];
    if (objectTypes.length === 0) {
      errors.push({ path: '/alertType', message: `no valid rule raises alerts of type ${input.alertType}` });
    }
  }
  const action = Object.hasOwn(schema.actionTypes, input.actionType) ? schema.actionTypes[input.actionType] : undefined;
  if (!action) {
    errors.push({ path: '/actionType', message: `action type ${input.actionType} is not in the world's schema` });
  }
  const parameters: ResolvedDecision['parameters'] = [];
  for (const [param, source] of Object.entries(input.parameters)) {
    const at = `/parameters/${param}`;
    if (action && !Object.hasOwn(action.parameters, param)) {
      errors.push({ path: at, message: `action type ${input.actionType} has no parameter ${param}` });
      continue;
    }
    const compiled = compile(source, ['self', 'derived', 'alert']);
    if (!compiled.ok) {
      errors.push({ path: at, message: compiled.message });
      continue;
    }
    for (const f of compiled.refs.alert) {
      if (!(ALERT_FIELDS as readonly string[]).includes(f)) {
        errors.push({ path: at, message: `alert.${f}: an alert has ${ALERT_FIELDS.join(', ')}` });
      }
    }
    for (const objectType of objectTypes) {
      errors.push(...missingProperties(compiled.refs, ownValue(schema.objectTypes, objectType), objectType, at));
      for (const d of compiled.refs.derived) {
        const def = derived.get(d);
        if (!def || def.objectType !== objectType || def.state !== 'valid') {
          errors.push({ path: at, message: `derived.${d}: ${objectType} has no valid derived property ${d}` });
        }
      }
    }
    parameters.push({ name: param, program: compiled.program });
  }
  if (action) {
    for (const [param, def] of Object.entries(action.parameters)) {
      if (def.required && !Object.hasOwn(input.parameters, param)) {
        errors.push({ path: `/parameters/${param}`, message: `is required by action type ${input.actionType}` });
      }
    }
  }
  if (errors.length > 0) return { errors };
  return {
    errors,
    resolved: {
      name,
      version,
      rule: input.rule,
      alertType: input.alertType,
      actionType: input.actionType,
      approval: input.approval,
      parameters,
    },
  };
}

import { emptySchema, type SchemaDocument } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import { evaluateChecks } from '../src/merges/checks.js';

/** A proposal's required checks on a dry run of the objects it writes (docs/adr/0085). */
const schema: SchemaDocument = {
  ...emptySchema(),
  objectTypes: {
    Order: {
      displayName: 'Order',
      primaryKey: 'id',
      properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
    },
  },
} as unknown as SchemaDocument;
const rule = (condition: string, objectType = 'Order') => ({
  objectType,
  condition,
  alertType: 'a',
  severity: 'warning',
});
const objects = [
  { type: 'Order', pk: 'o-1', properties: { id: 'o-1', amount: 50 } },
  { type: 'Order', pk: 'o-2', properties: { id: 'o-2', amount: 150 } },
  { type: 'Other', pk: 'x', properties: { amount: 1000 } },
];

describe('required checks on staged objects', () => {
  it("names the objects of the rule's type it fires on, and passes a rule that fires on none", () => {
    const rules = new Map([
      ['big', rule('self.amount > 100')],
      ['huge', rule('self.amount > 10000')],
    ]);
    expect(evaluateChecks(['big', 'huge'], rules, schema, objects)).toEqual([
      { rule: 'big', fired: [{ type: 'Order', pk: 'o-2' }] },
      { rule: 'huge', fired: [] },
    ]);
  });

  it('fails, with why, a rule the merge leaves out, one that reads derived properties, one that errs', () => {
    const rules = new Map([
      ['derivedRule', rule('derived.total > 1')],
      ['erring', rule('self.amount / 0 > 1')],
    ]);
    const [missing, derived, erring] = evaluateChecks(['gone', 'derivedRule', 'erring'], rules, schema, objects);
    expect(missing).toMatchObject({ rule: 'gone', fired: [], error: expect.stringContaining('not in the target') });
    expect(derived).toMatchObject({ fired: [], error: expect.stringContaining('derived properties (total)') });
    expect(erring?.error).toMatch(/^Order\/o-1: /);
  });
});

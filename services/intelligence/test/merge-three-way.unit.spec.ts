import { emptySchema, type SchemaDocument } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import type { Body, Kind, Version } from '../src/merges/history.js';
import { counts, finalBody, planEntries } from '../src/merges/plan.js';
import { classify, newer, settle } from '../src/merges/three-way.js';

const A = { objectType: 'Customer', expression: 'self.limit * 2', aggregates: {}, maxStalenessMs: 60000 };
const B = { ...A, expression: 'self.limit * 3' };
const C = { ...A, expression: 'self.limit * 4' };

describe('the three-way classification of one definition', () => {
  // [case, base, source, target, outcome]; each row also holds with source and target swapped.
  const table: [string, Body | null, Body | null, Body | null, 'source' | 'target' | 'conflict'][] = [
    ['unchanged', A, A, A, 'target'],
    ['source-changed', A, B, A, 'source'],
    ['target-changed', A, A, B, 'target'],
    ['both-alike', A, B, B, 'target'],
    ['added', null, A, null, 'source'],
    ['deleted', A, null, A, 'source'],
    ['modify-modify', A, B, C, 'conflict'],
    ['modify-modify', null, B, C, 'conflict'],
    ['modify-delete', A, null, B, 'conflict'],
    ['modify-delete', A, B, null, 'conflict'],
  ];
  it.each(table)('%s', (c, base, source, target, outcome) => {
    expect(classify(base, source, target)).toEqual({ case: c, outcome });
  });

  it('both directions: what one side does alone is taken from the source, kept in the target', () => {
    const swap = { source: 'target', target: 'source', conflict: 'conflict' } as const;
    const mirror = {
      unchanged: 'unchanged',
      'source-changed': 'target-changed',
      'target-changed': 'source-changed',
      'both-alike': 'both-alike',
      'modify-modify': 'modify-modify',
      'modify-delete': 'modify-delete',
    } as Record<string, string>;
    for (const [c, base, source, target, outcome] of table) {
      if (c === 'added' || c === 'deleted') {
        // Added or deleted in the target alone: kept as the target has it.
        expect(classify(base, target, source).outcome).toBe('target');
        continue;
      }
      const swapped = classify(base, target, source);
      expect(swapped.case).toBe(mirror[c]);
      if (outcome === 'conflict') expect(swapped.outcome).toBe('conflict');
      else expect(swapped.outcome).toBe(c === 'unchanged' || c === 'both-alike' ? 'target' : swap[outcome]);
    }
  });

  it('key order and absent optional fields do not make a change', () => {
    const reordered = { maxStalenessMs: 60000, aggregates: {}, expression: A.expression, objectType: 'Customer' };
    expect(classify(A, reordered, A).case).toBe('unchanged');
  });
});

describe('strategies', () => {
  it('TIMESTAMP_WINS takes the newer change; a tie goes to the greater definition seq', () => {
    expect(newer({ at: 2, seq: 1 }, { at: 1, seq: 9 })).toBe('source');
    expect(newer({ at: 1, seq: 9 }, { at: 2, seq: 1 })).toBe('target');
    expect(newer({ at: 5, seq: 7 }, { at: 5, seq: 3 })).toBe('source');
    expect(newer({ at: 5, seq: 3 }, { at: 5, seq: 7 })).toBe('target');
  });
  it('SOURCE_WINS and TARGET_WINS settle every conflict, MANUAL none', () => {
    const s = { at: 1, seq: 1 };
    const t = { at: 2, seq: 2 };
    expect(settle('SOURCE_WINS', s, t)).toBe('source');
    expect(settle('TARGET_WINS', s, t)).toBe('target');
    expect(settle('TIMESTAMP_WINS', s, t)).toBe('target');
    expect(settle('MANUAL', s, t)).toBeUndefined();
  });
});

const schema: SchemaDocument = {
  ...emptySchema(),
  objectTypes: {
    Customer: {
      apiName: 'Customer',
      displayName: 'Customer',
      primaryKey: 'id',
      properties: { id: { type: 'string', required: true }, limit: { type: 'integer' } },
    },
  },
  actionTypes: {
    flag: {
      apiName: 'flag',
      displayName: 'flag',
      parameters: { customer: { type: 'string', required: true } },
      edits: [],
    },
  } as unknown as SchemaDocument['actionTypes'],
};

let seq = 0;
const side = (defs: [Kind, string, Body | null][]) =>
  new Map<string, Version>(
    defs.map(([kind, name, body]) => [
      `${kind}/${name}`,
      { kind, name, body, version: 1, seq: ++seq, at: seq, writtenAt: new Date(seq).toISOString() },
    ]),
  );
const rule = { objectType: 'Customer', condition: 'self.limit > 10', alertType: 'big', severity: 'info' };
const decision = { rule: 'big', actionType: 'flag', parameters: { customer: 'self.id' }, approval: 'manual' };

describe('a plan checked against the merged schema', () => {
  it('a deleted rule that a decision definition in the target still decides on is a RULE_CONFLICT', () => {
    const base = side([['rule', 'big', rule]]);
    const source = side([['rule', 'big', null]]);
    const target = side([
      ['rule', 'big', rule],
      ['decision', 'review', decision],
    ]);
    const [manual] = planEntries(base, source, target, 'MANUAL', schema as never);
    expect(manual).toMatchObject({ kind: 'rule', name: 'big', case: 'deleted', conflict: { id: 'i-1' } });
    expect(manual?.conflict?.reason).toContain('decision review in the target reads rule big');
    expect(finalBody(manual as never)).toBeUndefined();
    // An automatic strategy keeps the target's side: the rule stays.
    const [auto] = planEntries(base, source, target, 'SOURCE_WINS', schema as never);
    expect(auto?.decided).toBe('target');
    expect(counts([auto as never])).toEqual({ derived: 0, rules: 0, decisions: 0 });
  });

  it('an added definition that does not hold against the merged schema is a RULE_CONFLICT naming why', () => {
    const source = side([['derived', 'd', { ...A, expression: 'self.missing * 2' }]]);
    const [e] = planEntries(new Map(), source, new Map(), 'MANUAL', schema as never);
    expect(e).toMatchObject({ case: 'added', conflict: { id: 'i-1' } });
    expect(e?.conflict?.reason).toMatch(/missing/);
  });

  it('a decision definition added with its rule holds; without the rule it conflicts', () => {
    const both = side([
      ['rule', 'big', rule],
      ['decision', 'review', decision],
    ]);
    const plan = planEntries(new Map(), both, new Map(), 'SOURCE_WINS', schema as never);
    expect(plan.map((e) => e.conflict)).toEqual([undefined, undefined]);
    expect(counts(plan)).toEqual({ derived: 0, rules: 1, decisions: 1 });
    const alone = side([['decision', 'review', decision]]);
    expect(planEntries(new Map(), alone, new Map(), 'SOURCE_WINS', schema as never)[0]?.conflict?.reason).toMatch(
      /rule big is not defined/,
    );
  });
});

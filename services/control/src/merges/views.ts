/** What the merge routes answer: the TypeBox schemas (in /docs/json) and the rows shaped into them. */
import { type TSchema, Type } from '@sinclair/typebox';
import type { MergeRow, PartRow } from './repository.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const Counts = Type.Record(Type.String(), Type.Integer());
const Point = Type.Object({
  world: Type.String(),
  schemaVersion: Type.Integer(),
  dataSeq: Type.Integer(),
  definitions: Type.Integer(),
});
const Failure = Type.Object({
  service: Type.String({ description: 'control, data or intelligence' }),
  phase: Type.String({ description: 'plan, apply or compensate' }),
  status: Type.Integer({ description: 'the HTTP status it maps to: 409 when the target moved' }),
  reason: Type.String(),
  field: Type.Optional(Type.String()),
});

export const Conflict = Type.Object({
  id: Type.String({ description: 'c-<n> control (schema), d-<n> data (objects, links), i-<n> intelligence' }),
  type: Type.String({ description: 'MODIFY_MODIFY, MODIFY_DELETE, SCHEMA_CONFLICT or RULE_CONFLICT' }),
  entity: Type.Record(Type.String(), Type.Unknown()),
  base: Type.Unknown(),
  source: Type.Unknown(),
  target: Type.Unknown(),
  sourceAt: Nullable(Type.String()),
  targetAt: Nullable(Type.String()),
  reason: Nullable(Type.String()),
  needsPerson: Type.Boolean({ description: 'no strategy settles it: the merged entity fails the merged schema' }),
  resolution: Nullable(
    Type.Object({
      take: Nullable(Type.String({ description: 'source, target or value; null: the service broke a tie' })),
      value: Type.Optional(Type.Unknown()),
      by: Type.String({ description: 'who resolved it: a user, or strategy:<STRATEGY>' }),
      at: Type.String(),
    }),
  ),
});

const summaryFields = {
  id: Type.String(),
  source: Type.String(),
  target: Type.String(),
  strategy: Type.String(),
  dryRun: Type.Boolean(),
  status: Type.String({
    description:
      'RUNNING, CONFLICTS, PROPOSED (into a world whose protection asks for approvals: waits for them, docs/adr/0085), MERGED, FAILED or COMPENSATED',
  }),
  phase: Type.String({
    description:
      'planning, conflicts, proposed (waiting for approvals), applying, compensating or done; a PROPOSED merge sent back for a new plan is planning until the plan is in',
  }),
  round: Type.Integer({
    description: 'the plan round: 0, then one more each time a proposal was sent back for a new plan',
  }),
  sentBack: Nullable(
    Type.Object(
      { round: Type.Integer(), reason: Type.String(), at: Type.String() },
      {
        description:
          'why the proposal was last sent back for a new plan (a write to the target or the source after its plan read them); its approvals were void',
      },
    ),
  ),
  base: Nullable(Point),
  reverts: Nullable(
    Type.String({ description: 'a revert (POST …/merges/{id}/revert): the merge it undoes; null for a merge' }),
  ),
  result: Nullable(
    Type.Object(
      { schemaVersion: Type.Integer(), dataSeq: Nullable(Type.Integer()), definitions: Nullable(Type.Integer()) },
      { description: "the merge commit: the target's point after the merge (its dataSeq works as ?at=)" },
    ),
  ),
  failure: Nullable(Failure),
  counts: Type.Object({
    conflicts: Type.Integer(),
    unresolved: Type.Integer(),
    byType: Type.Optional(Counts),
  }),
  actor: Type.String(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
};
export const MergeSummary = Type.Object(summaryFields);

const Part = Type.Object({
  service: Type.String(),
  state: Type.String({ description: 'planned, applied, failed or compensated' }),
  source: Nullable(Type.Integer({ description: "the source's position the plan read" })),
  target: Nullable(Type.Integer({ description: "the target's position read, then the one after the apply" })),
  changes: Counts,
  conflicts: Type.Integer(),
  applied: Nullable(Counts),
  reverted: Nullable(Counts),
  notReverted: Nullable(Type.Array(Type.Unknown())),
  failure: Nullable(Failure),
});

export const Merge = Type.Object({
  ...summaryFields,
  applied: Type.Object({
    control: Nullable(
      Type.Object(
        { schemaVersion: Type.Integer(), revertedBy: Nullable(Type.Integer()) },
        { description: "control's part: the schema version written" },
      ),
    ),
    data: Nullable(Counts),
    intelligence: Nullable(Counts),
  }),
  parts: Type.Array(Part),
  proposal: Type.Object(
    {
      requiredApprovals: Type.Integer({
        description: "what the target's protection asks for now (0: the merge is no proposal)",
      }),
      approvals: Type.Array(Type.Object({ by: Type.String(), at: Type.String() }), {
        description: "the owners who approved this round's plan, other than the merge's author",
      }),
      requiredChecks: Type.Array(Type.String(), {
        description: "the rules that must not fire on the merge's result, as the target's protection names them now",
      }),
      checks: Nullable(
        Type.Object(
          {
            state: Type.String({ description: 'running, passed or failed' }),
            ranAt: Nullable(Type.String({ description: 'when the last result came in' })),
            results: Type.Array(
              Type.Object({
                rule: Type.String(),
                fired: Type.Array(Type.Object({ type: Type.String(), pk: Type.String() }), {
                  description: 'objects the merge would create or change that the rule fires on (at most 200 named)',
                }),
                firedCount: Type.Integer(),
                errors: Type.Array(Type.String(), {
                  description: 'why the rule could not be evaluated: the check fails',
                }),
              }),
            ),
          },
          {
            description:
              "the required checks on a dry run of this round's plan: each rule evaluated on the objects the merge would create or change, as they would be after it (docs/adr/0085); null: none asked for",
          },
        ),
      ),
    },
    { description: 'approvals of a merge into a protected world (POST …/approve, docs/adr/0085)' },
  ),
  conflicts: Type.Array(Conflict),
  conflictsNext: Nullable(Type.String({ description: 'pass as ?conflicts= for the next page of conflicts' })),
});

export interface ConflictDbRow {
  seq: string;
  id: string;
  type: string;
  entity: Record<string, unknown>;
  base: unknown;
  source: unknown;
  target: unknown;
  source_at: Date | null;
  target_at: Date | null;
  reason: string | null;
  needs_person: boolean;
  resolution_take: string | null;
  resolution_value: unknown;
  resolved_by: string | null;
  resolved_at: Date | null;
}

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

export function conflictView(c: ConflictDbRow) {
  return {
    id: c.id,
    type: c.type,
    entity: c.entity,
    base: c.base,
    source: c.source,
    target: c.target,
    sourceAt: iso(c.source_at),
    targetAt: iso(c.target_at),
    reason: c.reason,
    needsPerson: c.needs_person,
    resolution:
      c.resolved_by === null
        ? null
        : {
            take: c.resolution_take,
            ...(c.resolution_take === 'value' ? { value: c.resolution_value } : {}),
            by: c.resolved_by,
            at: iso(c.resolved_at) as string,
          },
  };
}

export function summaryView(
  m: MergeRow,
  counts: { total: number; unresolved: number; byType?: Record<string, number> },
) {
  return {
    id: m.id,
    source: m.source,
    target: m.target,
    strategy: m.strategy,
    dryRun: m.dry_run,
    status: m.status,
    phase: m.phase,
    base: m.base,
    reverts: m.reverts,
    round: m.round,
    sentBack: m.sent_back,
    result: m.result,
    failure: m.failure,
    counts: {
      conflicts: counts.total,
      unresolved: counts.unresolved,
      ...(counts.byType ? { byType: counts.byType } : {}),
    },
    actor: m.actor,
    createdAt: iso(m.created_at) as string,
    updatedAt: iso(m.updated_at) as string,
  };
}

export function mergeView(
  m: MergeRow,
  ps: PartRow[],
  conflicts: ConflictDbRow[],
  byType: { type: string; total: number; unresolved: number }[],
  page: { next: string | null },
  proposal: { requiredApprovals: number; approvals: { by: string; at: string }[]; requiredChecks: string[] },
) {
  const part = (s: string) => ps.find((p) => p.service === s);
  const num = (v: string | null) => (v === null ? null : Number(v));
  return {
    ...summaryView(m, {
      total: byType.reduce((n, t) => n + t.total, 0),
      unresolved: byType.reduce((n, t) => n + t.unresolved, 0),
      byType: Object.fromEntries(byType.map((t) => [t.type, t.total])),
    }),
    applied: {
      control:
        m.applied_schema_version === null
          ? null
          : { schemaVersion: m.applied_schema_version, revertedBy: m.compensated_schema_version },
      data: part('data')?.applied ?? null,
      intelligence: part('intelligence')?.applied ?? null,
    },
    parts: ps.map((p) => ({
      service: p.service,
      state: p.state,
      source: num(p.source_pos),
      target: num(p.target_pos),
      changes: p.changes,
      conflicts: p.conflicts,
      applied: p.applied,
      reverted: p.reverted,
      notReverted: p.not_reverted,
      failure: p.failure,
    })),
    proposal: {
      ...proposal,
      checks: m.checks ? { state: m.checks.state, ranAt: m.checks.ranAt, results: m.checks.results } : null,
    },
    conflicts: conflicts.map(conflictView),
    conflictsNext: page.next,
  };
}

/**
 * The contract of an action's saga on `domain.actions` between intelligence (which runs the
 * action) and data (which applies its steps): what a step asks for and what data answers.
 * intelligence resolves an ActionType's edits into commands on concrete objects and links; data
 * applies the commands of one step in one transaction through its write path and replies with
 * what compensating them would need (the state before), or with why it refused.
 */
import { type Static, type TProperties, type TSchema, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { FieldError } from '../errors/problem.js';
import { UUID_V7 } from '../ids/uuidv7.js';

const Name = Type.String({ pattern: '^[A-Za-z][A-Za-z0-9_]{0,62}$' });
const Key = Type.String({ minLength: 1, maxLength: 512 });
const Properties = Type.Record(Type.String(), Type.Unknown());
/** The version the head (live or tombstone) must be at for the command to apply. */
const IfVersion = Type.Optional(Type.Integer({ minimum: 1 }));

/** A command: its `op` and these fields, nothing else. */
const command = <Op extends string, Fields extends TProperties>(op: Op, fields: Fields) =>
  Type.Object({ op: Type.Literal(op), ...fields }, { additionalProperties: false });

export const StepCommandSchema = Type.Union([
  /** Creates an object that does not exist (a tombstone may be there: it is revived). */
  command('createObject', { objectType: Name, pk: Key, properties: Properties }),
  /** A merge patch of an existing object's top-level properties (null removes one). */
  command('modifyObject', { objectType: Name, pk: Key, properties: Properties, ifVersion: IfVersion }),
  /** Puts the object back to `properties`, live or deleted: how a modify or a delete is undone. */
  command('replaceObject', { objectType: Name, pk: Key, properties: Properties, ifVersion: IfVersion }),
  command('deleteObject', { objectType: Name, pk: Key, ifVersion: IfVersion }),
  command('createLink', { linkType: Name, from: Key, to: Key, ifVersion: IfVersion }),
  command('deleteLink', { linkType: Name, from: Key, to: Key, ifVersion: IfVersion }),
]);
export type StepCommand = Static<typeof StepCommandSchema>;

export const STEP_PHASES = ['forward', 'compensation'] as const;
export type StepPhase = (typeof STEP_PHASES)[number];
const Phase = Type.Union(STEP_PHASES.map((p) => Type.Literal(p)));
const ActionId = Type.String({ pattern: UUID_V7.source });

/** `action.step.requested`: the commands of one step, applied all or none. */
export const StepRequestedSchema = Type.Object({
  actionId: ActionId,
  actionType: Name,
  step: Type.Integer({ minimum: 0 }),
  phase: Phase,
  commands: Type.Array(StepCommandSchema, { minItems: 1, maxItems: 1000 }),
  actor: Type.String({ minLength: 1 }),
  /** The schema version intelligence planned the step with; data waits (bounded) for it. */
  schemaVersion: Type.Integer({ minimum: 0 }),
});
export type StepRequested = Static<typeof StepRequestedSchema>;

/** A live link an object's delete took with it: re-created when the delete is undone. */
export const RemovedLinkSchema = Type.Object({
  linkType: Name,
  from: Key,
  to: Key,
  /** The link's tombstone version. */
  version: Type.Integer({ minimum: 1 }),
});

/** What one command did, with what undoing it needs. */
export const CommandResultSchema = Type.Object({
  op: Type.String(),
  /** false when the store already was as asked (nothing written, nothing to undo). */
  changed: Type.Boolean(),
  /** The head's version after the command (a tombstone's for a delete). */
  version: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
  /** The head before: its version, and its properties (null when absent or deleted). */
  before: Type.Union([
    Type.Object({
      version: Type.Integer({ minimum: 1 }),
      deleted: Type.Boolean(),
      properties: Type.Union([Properties, Type.Null()]),
    }),
    Type.Null(),
  ]),
  removedLinks: Type.Optional(Type.Array(RemovedLinkSchema)),
});
export type CommandResult = Static<typeof CommandResultSchema>;

/** `action.step.completed`: every command applied, in one transaction of data. */
export const StepCompletedSchema = Type.Object({
  actionId: ActionId,
  step: Type.Integer({ minimum: 0 }),
  phase: Phase,
  results: Type.Array(CommandResultSchema),
  /** data's write sequence after the step: its consistency token (data=<seq>). */
  seq: Type.Integer({ minimum: 0 }),
});
export type StepCompleted = Static<typeof StepCompletedSchema>;

/** Why data refused a step: the HTTP status and problem its write path would have answered. */
export const StepRefusalSchema = Type.Object({
  status: Type.Integer({ minimum: 400, maximum: 599 }),
  code: Type.String(),
  message: Type.String(),
  /** Which command of the step was refused. */
  command: Type.Integer({ minimum: 0 }),
  errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
});
export type StepRefusal = Static<typeof StepRefusalSchema> & { errors?: FieldError[] };

/** `action.step.refused`: nothing of the step was applied. */
export const StepRefusedSchema = Type.Object({
  actionId: ActionId,
  step: Type.Integer({ minimum: 0 }),
  phase: Phase,
  reason: StepRefusalSchema,
});
export type StepRefused = Static<typeof StepRefusedSchema>;

/** A payload that does not match its event type's contract. */
export class InvalidActionPayload extends Error {
  override readonly name = 'InvalidActionPayload';
}

function parser<T extends TSchema>(name: string, schema: T) {
  const check = TypeCompiler.Compile(schema);
  return (payload: unknown): Static<T> => {
    if (check.Check(payload)) return payload;
    const first = check.Errors(payload).First();
    throw new InvalidActionPayload(`${name}: ${first?.path || '/'} ${first?.message ?? 'does not match'}`);
  };
}

export const parseStepRequested = parser('action.step.requested', StepRequestedSchema);
export const parseStepCompleted = parser('action.step.completed', StepCompletedSchema);
export const parseStepRefused = parser('action.step.refused', StepRefusedSchema);

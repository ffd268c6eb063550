import { type TObject, type TProperties, type TSchema, Type } from '@sinclair/typebox';
import { UUID_V7 } from '../ids/uuidv7.js';
import {
  StepCommandSchema,
  StepCompletedSchema,
  StepRefusalSchema,
  StepRefusedSchema,
  StepRequestedSchema,
} from '../ontology/actions.js';
import type { EventType } from './catalogue.js';
import { HeartbeatPayload, KeysPublishedPayload, RolesChangedPayload, TokenRevokedPayload } from './identity.js';

/**
 * The payload of every event type onto publishes, version 1 (docs/adr/0020). A payload declares
 * every field its producer writes: a field produced but not declared fails the producer's check.
 * The identity payloads are open (auth/events), so control can add a field before replicas read it.
 */

/** A payload with exactly these fields. */
const closed = <T extends TProperties>(properties: T, description: string): TObject<T> =>
  Type.Object(properties, { additionalProperties: false, description });

const Uuid = Type.String({ pattern: UUID_V7.source });
const Text = Type.String({ minLength: 1 });
const Count = Type.Integer({ minimum: 0 });
const Instant = Type.String({ description: 'an ISO 8601 instant' });
const Properties = Type.Record(Type.String(), Type.Unknown(), { description: "an object's properties" });
const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);
const Actor = Type.String({ minLength: 1, description: 'the principal who asked for the change' });
const RequestId = Type.String({ description: 'the x-request-id of the request that made the change' });
/** When data committed a write: the time an instant in `?at=` is resolved by (docs/adr/0069). */
const WrittenAt = Type.Optional(
  Type.String({
    pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,6})?(Z|[+-]\\d{2}:\\d{2})$',
    description:
      "the write's commit time in data, to the microsecond (data's written_at): ?at=<instant> reads the last commit written at or before the instant, in data and in intelligence",
  }),
);

const objectChange = (what: string) =>
  closed(
    {
      type: Type.String({ minLength: 1, description: 'the object type' }),
      pk: Type.String({ minLength: 1, description: "the object's primary key" }),
      version: Type.Integer({ minimum: 0, description: "the object's version after the change" }),
      before: Nullable(Properties),
      after: Nullable(Properties),
      actor: Actor,
      requestId: RequestId,
      schemaVersion: Type.Integer({ minimum: 0, description: 'the world schema version the change was checked with' }),
      writtenAt: WrittenAt,
    },
    what,
  );

const LinkEnd = closed({ type: Text, pk: Text }, 'one end of a link: an object type and primary key');
const LinkEnds = closed({ from: LinkEnd, to: LinkEnd }, "a link's two ends");
const linkChange = (what: string) =>
  closed(
    {
      type: Type.String({ minLength: 1, description: 'the link type' }),
      pk: Type.String({ minLength: 1, description: "the link's own key: its two ends' primary keys" }),
      from: LinkEnd,
      to: LinkEnd,
      version: Type.Integer({ minimum: 0 }),
      before: Nullable(LinkEnds),
      after: Nullable(LinkEnds),
      actor: Actor,
      requestId: RequestId,
      writtenAt: WrittenAt,
    },
    what,
  );

const ProvisioningReport = (what: string) =>
  closed({ service: Type.Union([Type.Literal('data'), Type.Literal('intelligence')]) }, what);

/** The merge saga (docs/adr/0037): ids, strategies and the pieces its events share. */
const MergeId = Type.String({ pattern: UUID_V7.source, description: 'the merge, as control named it' });
export const MERGE_STRATEGIES = ['SOURCE_WINS', 'TARGET_WINS', 'TIMESTAMP_WINS', 'MANUAL'] as const;
export const MERGE_CONFLICT_TYPES = ['MODIFY_MODIFY', 'MODIFY_DELETE', 'SCHEMA_CONFLICT', 'RULE_CONFLICT'] as const;
const Strategy = Type.Union(
  MERGE_STRATEGIES.map((s) => Type.Literal(s)),
  { description: 'how conflicts are settled' },
);
const Position = Type.Integer({
  minimum: 0,
  description: "a service's position in a world: data's write sequence, intelligence's definition sequence",
});
const Counts = Type.Record(Type.String(), Count, {
  description: 'how many of each kind of entity (objects, links, …)',
});
const MergeConflict = closed(
  {
    id: Type.String({
      pattern: '^[cdi]-[0-9]+$',
      description: "unique in the merge: the service's initial (c, d, i), a dash and a number",
    }),
    type: Type.Union(MERGE_CONFLICT_TYPES.map((t) => Type.Literal(t))),
    entity: Type.Record(Type.String(), Type.Unknown(), {
      description:
        'what conflicts: {kind: object, type, pk, property?} | {kind: link, linkType, from, to} | {kind: objectType|linkType|actionType, apiName, property?} | {kind: derived|rule|decision, name}',
    }),
    base: Type.Unknown({ description: 'the value at the merge base (null when absent)' }),
    source: Type.Unknown({ description: 'the value in the source (null when absent or deleted)' }),
    target: Type.Unknown({ description: 'the value in the target (null when absent or deleted)' }),
    sourceAt: Type.Optional(Nullable(Instant)),
    targetAt: Type.Optional(Nullable(Instant)),
    reason: Type.Optional(Type.String({ description: 'why it conflicts, when the type alone does not say' })),
  },
  'one conflict a merge found',
);
const mergeReplies = (service: 'data' | 'intelligence') => {
  const Service = Type.Literal(service);
  return {
    planned: closed(
      {
        merge: MergeId,
        service: Service,
        source: Position,
        target: Position,
        changes: Counts,
        conflicts: Type.Integer({
          minimum: 0,
          description: 'how many conflicts the conflicts.found events before this one carried',
        }),
      },
      `${service} computed its part of a merge (source and target at the positions it read)`,
    ),
    conflictsFound: closed(
      { merge: MergeId, service: Service, conflicts: Type.Array(MergeConflict, { minItems: 1, maxItems: 200 }) },
      `conflicts ${service} found planning a merge, at most 200 an event, sent before its planned event`,
    ),
    applied: closed(
      { merge: MergeId, service: Service, target: Position, applied: Counts },
      `${service} applied its part of a merge in one transaction; target is its position in the target after it`,
    ),
    failed: closed(
      {
        merge: MergeId,
        service: Service,
        phase: Type.Union([
          Type.Literal('plan'),
          Type.Literal('apply'),
          Type.Literal('compensate'),
          Type.Literal('verify'),
        ]),
        status: Type.Integer({
          minimum: 400,
          maximum: 599,
          description: 'the HTTP status the failure maps to (409 when the target moved)',
        }),
        reason: Text,
        field: Type.Optional(Type.String()),
      },
      `${service} could not do its part of a merge; nothing of that step was applied`,
    ),
    compensated: closed(
      {
        merge: MergeId,
        service: Service,
        reverted: Counts,
        notReverted: Type.Array(Type.Record(Type.String(), Type.Unknown()), {
          maxItems: 200,
          description: 'entities written again since the merge, left as they are (at most 200 named)',
        }),
      },
      `${service} undid its applied part of a merge`,
    ),
    verified: closed(
      {
        merge: MergeId,
        service: Service,
        verification: Uuid,
        checked: Count,
        differences: Count,
        sample: Type.Array(
          closed(
            { entity: Type.Record(Type.String(), Type.Unknown()), expected: Type.Unknown(), actual: Type.Unknown() },
            'a difference between the recomputed merge and the target',
          ),
          { maxItems: 50 },
        ),
      },
      `${service} recomputed a finished merge from its base, source and target and compared it with the target`,
    ),
  };
};
/** The objects a proposal's plan leaves in the target, at most 200 an event (docs/adr/0085). */
const CHECK_CHUNK = {
  chunk: Type.Integer({ minimum: 0, description: "this event's chunk of the objects, from 0" }),
  chunks: Type.Integer({ minimum: 1, description: 'how many chunks there are (1 when the merge writes no object)' }),
};
const StagedObject = closed(
  {
    type: Text,
    pk: Text,
    properties: Type.Record(Type.String(), Type.Unknown(), { description: 'the object as the merge would leave it' }),
  },
  'an object the merge would create or change in the target, as it would be after the merge',
);
const StagedObjects = Type.Array(StagedObject, { maxItems: 200 });

const DATA_MERGE = mergeReplies('data');
const INTELLIGENCE_MERGE = mergeReplies('intelligence');

const AlertFields = {
  alertId: Uuid,
  rule: Text,
  ruleVersion: Count,
  alertType: Text,
  severity: Text,
  objectType: Text,
  pk: Text,
  raisedAt: Instant,
  /** The data change that made the condition flip, when one did. */
  changeEventId: Type.Optional(Uuid),
};

const DecisionFields = {
  decisionId: Uuid,
  definition: Text,
  definitionVersion: Count,
  alertId: Uuid,
  rule: Text,
  alertType: Text,
  objectType: Text,
  pk: Text,
  actionType: Text,
  parameters: Nullable(Type.Record(Type.String(), Type.Unknown())),
  approval: Type.Union([Type.Literal('automatic'), Type.Literal('manual')]),
  status: Type.Union(['PENDING_APPROVAL', 'APPROVED', 'REJECTED', 'EXECUTED', 'FAILED'].map((s) => Type.Literal(s))),
  decidedBy: Nullable(Type.String()),
  reason: Type.Optional(Type.String()),
  error: Type.Optional(Type.Object({ path: Type.Optional(Type.String()), message: Type.String() })),
  actionId: Type.Optional(Uuid),
  /** On decision.executed: the action was one started before under the same idempotency key. */
  replayed: Type.Optional(Type.Boolean()),
};

const Phase = Type.Union([Type.Literal('forward'), Type.Literal('compensation')]);
const RecordedRefusal = Type.Composite([StepRefusalSchema, Type.Object({ step: Count, phase: Phase })]);
const actionEnd = (what: string) =>
  closed(
    {
      actionId: Uuid,
      actionType: Text,
      status: Type.Union([Type.Literal('COMPLETED'), Type.Literal('COMPENSATED'), Type.Literal('FAILED')]),
      refusal: Nullable(RecordedRefusal),
      steps: Type.Array(closed({ n: Count, state: Text }, 'a step and the state it ended in')),
      failure: Type.Optional(Type.Composite([StepRefusalSchema, Type.Object({ step: Count, phase: Phase })])),
    },
    what,
  );

const closedCopy = <T extends TProperties>(schema: TObject<T>, description: string) =>
  closed(schema.properties, description);

/** What a recorded request did (docs/adr/0084); a refused request commits nothing and is not recorded. */
export const AUDIT_RESULTS = ['created', 'updated', 'deleted', 'accepted', 'unchanged'] as const;
const AuditVersion = (when: string) =>
  Nullable(Type.Integer({ minimum: 0, description: `the target's version ${when} (null: it has none)` }));

export const AuditRecordedPayload = closed(
  {
    actor: Actor,
    tokenId: Nullable(Type.String({ minLength: 1, description: "the access token's id (its jti); null before one" })),
    world: Nullable(Type.String({ minLength: 1, description: 'the world acted on; null for an action of no world' })),
    action: Type.String({
      pattern: '^[a-z][a-z0-9-]*(\\.[a-z][a-z0-9-]*)+$',
      description: 'what was done, e.g. object.put',
    }),
    target: Nullable(Type.String({ minLength: 1, description: 'what was acted on, e.g. Order/o-1' })),
    requestId: RequestId,
    result: Type.Union(
      AUDIT_RESULTS.map((r) => Type.Literal(r)),
      {
        description:
          'created, updated, deleted, accepted (asynchronous work started) or unchanged (the request succeeded and found nothing to change)',
      },
    ),
    beforeVersion: AuditVersion('before the change'),
    afterVersion: AuditVersion('after the change'),
    detail: Type.Record(Type.String(), Type.Unknown(), { description: "the action's own facts, e.g. a count" }),
  },
  'a state-changing request or administrative action was committed (docs/adr/0084): who, what, on which world',
);

export const EVENT_PAYLOADS = {
  'schema.updated': closed(
    {
      version: Type.Integer({ minimum: 1 }),
      previousVersion: Count,
      diff: Type.Object(
        { changes: Type.Array(Type.Record(Type.String(), Type.Unknown())), breaking: Type.Boolean() },
        { description: 'what changed from the previous version, and whether stored data may no longer fit' },
      ),
      schema: Type.Record(Type.String(), Type.Unknown(), { description: 'the whole schema document' }),
      author: Text,
    },
    "a new version of a world's schema, with the whole document",
  ),
  'world.created': closed(
    {
      from: Nullable(
        closed(
          {
            world: Text,
            schemaVersion: Count,
            ref: Type.Optional(
              closed(
                { commit: Type.Optional(Count), instant: Type.Optional(Instant) },
                "where in the base's history the fork starts: a data commit or an instant; absent = now",
              ),
            ),
          },
          'the world, schema version and ref it was forked from',
        ),
      ),
      createdBy: Text,
    },
    'a world was created and is being provisioned',
  ),
  'world.deleted': closed({}, 'a world is being deleted'),
  'world.drop.requested': closed(
    { reason: Text, provisioned: Type.Array(Text) },
    'provisioning failed: the services that provisioned the world drop it',
  ),
  'world.merge.requested': closed(
    {
      merge: MergeId,
      source: Text,
      target: Text,
      strategy: Strategy,
      dryRun: Type.Boolean(),
      base: Nullable(
        closed(
          {
            world: Text,
            schemaVersion: Count,
            dataSeq: Count,
            definitions: Position,
          },
          'the merge base: one world at one point of each service (null: the two worlds share no history)',
        ),
      ),
      schema: Type.Record(Type.String(), Type.Unknown(), {
        description:
          "the merged schema the objects are checked against (a MANUAL schema conflict: the target's side until resolved)",
      }),
      actor: Actor,
      reverts: Type.Optional(
        Type.String({
          pattern: UUID_V7.source,
          description:
            'a revert (docs/adr/0081): the MERGED merge of the same world it undoes. The source is the target before that merge (each service reads it from its record of the merge), the base the target right after it, and only what that merge wrote is a candidate',
        }),
      ),
    },
    'control asks data and intelligence to compute their part of a merge (docs/adr/0037)',
  ),
  'world.merge.conflict.resolved': closed(
    {
      merge: MergeId,
      conflict: Type.String({ pattern: '^[cdi]-[0-9]+$' }),
      take: Type.Union([Type.Literal('source'), Type.Literal('target'), Type.Literal('value')]),
      value: Type.Optional(Type.Unknown()),
    },
    'a person resolved one conflict of a MANUAL merge; the service whose conflict it is records it',
  ),
  'world.merge.apply': closed(
    {
      merge: MergeId,
      schemaVersion: Type.Integer({
        minimum: 1,
        description: "the target's schema version with control's part applied",
      }),
      schema: Type.Record(Type.String(), Type.Unknown(), { description: 'that schema document' }),
    },
    'control applied its part of a merge: data and intelligence apply theirs',
  ),
  'world.merge.compensate': closed(
    { merge: MergeId, reason: Text },
    'a part of a merge failed: the services that applied theirs undo it',
  ),
  'world.merge.verify.requested': closed(
    { merge: MergeId, verification: Uuid },
    'merge-verify: data and intelligence recompute a finished merge and compare it with the target',
  ),
  'world.merge.stage.requested': closed(
    { merge: MergeId },
    "a proposal's required checks (docs/adr/0085): data reports the objects its plan would leave in the target, as merge.staged",
  ),
  'world.merge.check.requested': closed(
    {
      merge: MergeId,
      checks: Type.Array(Text, {
        maxItems: 50,
        description: "the names of the rules that must not fire (the target's requiredChecks)",
      }),
      ...CHECK_CHUNK,
      objects: StagedObjects,
    },
    "a proposal's required checks on one chunk of the objects its plan would leave in the target: intelligence evaluates the rules, as the merge would leave them, on a dry run of those objects (docs/adr/0085)",
  ),
  'check.requested': closed(
    { checkId: Uuid },
    'the consistency checker asks data and intelligence for their report of a world (docs/adr/0032)',
  ),
  'objects.recount.requested': closed(
    {
      checkId: Uuid,
      type: Type.String({ minLength: 1, description: 'the object type whose counts differ' }),
    },
    "the checker asks data to re-announce a type's live objects as object.announced (the recount repair)",
  ),
  'links.recount.requested': closed(
    {
      checkId: Uuid,
      type: Type.String({ minLength: 1, description: 'the link type whose counts differ' }),
    },
    "the checker asks data to re-announce a link type's live links as link.announced (the link recount repair)",
  ),
  'derived.recompute.requested': closed(
    {
      checkId: Uuid,
      name: Type.String({ minLength: 1, description: 'the derived property found stale' }),
    },
    'the checker asks intelligence to recompute a derived property for every object of its type',
  ),
  'world.tag.requested': closed(
    {
      tag: Text,
      request: Type.String({ pattern: UUID_V7.source, description: 'names this request; the replies carry it back' }),
    },
    'a world-level tag was made: data and intelligence reply with their position in the world (docs/adr/0029)',
  ),
  'world.tag.deleted': closed(
    {
      tag: Text,
      request: Type.String({ pattern: UUID_V7.source, description: 'the request that made the tag deleted' }),
    },
    'a world-level tag was deleted: data and intelligence stop resolving its name in ?at= (docs/adr/0046); no reply',
  ),
  'world.protection.updated': closed(
    {
      requireMerge: Type.Boolean({ description: 'direct writes are refused (403): changes come by merge' }),
      requiredApprovals: Count,
      requiredChecks: Type.Array(Text, {
        description: 'rules of intelligence that must not fire on the merged result',
      }),
      allowActions: Type.Boolean({ description: "with requireMerge, actions' edits are still applied" }),
      revision: Type.Integer({ minimum: 1, description: "the protection's revision: only a greater one replaces it" }),
    },
    "a world's protection was set (docs/adr/0058): data and intelligence enforce it",
  ),
  'world.retention.updated': closed(
    {
      keepDays: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
        description: 'history is kept at least this many days (null: forever)',
      }),
      keepVersions: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], {
        description: 'and at least this many newest versions of each key (null: no count rule)',
      }),
      revision: Type.Integer({ minimum: 1, description: "the policy's revision: only a greater one replaces it" }),
    },
    "a world's history retention was set (docs/adr/0072): data prunes what no kept ref needs",
  ),
  'identity.token.revoked': TokenRevokedPayload,
  'identity.roles.changed': RolesChangedPayload,
  'identity.keys.published': KeysPublishedPayload,
  'identity.heartbeat': HeartbeatPayload,
  'storage.schema.updated': closed(
    {
      world: Text,
      version: Type.Integer({ minimum: 1 }),
      previousVersion: Count,
      indexes: Type.Array(
        closed({ name: Text, objectType: Text, property: Text, state: Text }, 'an index the schema asks for'),
      ),
    },
    'data applied a schema version',
  ),
  'world.provisioned': closed(
    {
      service: Type.Union([Type.Literal('data'), Type.Literal('intelligence')]),
      base: Type.Optional(closed({ world: Text, commit: Count }, "a fork's base world and the commit it starts at")),
      created: Type.Optional(
        closed(
          { commit: Count, at: Instant },
          "the world's first commit in data and when data provisioned it (to the microsecond): a ref before either is before the world existed",
        ),
      ),
    },
    'data provisioned a world',
  ),
  // Open, its fields optional: it was reserved as an open object, and may only gain optional fields (data sends all three).
  'world.provision.failed': Type.Object(
    {
      service: Type.Optional(Type.Literal('data')),
      field: Type.Optional(
        Type.String({ description: 'the field of the request that cannot be honoured, like /from/ref' }),
      ),
      reason: Type.Optional(Text),
    },
    { description: 'data cannot provision a world (a fork at a ref it cannot resolve); it recorded nothing' },
  ),
  'world.dropped': ProvisioningReport("data dropped a world's data"),
  'storage.position': closed(
    {
      seq: Type.Integer({
        minimum: 1,
        description: "the world's newest committed write: data's write sequence (a consistency token's data=<n>)",
      }),
    },
    "data's position in a world, announced at most once per interval while it changes (the version vector)",
  ),
  'storage.history.horizon': closed(
    {
      horizon: Type.Integer({
        minimum: 0,
        description:
          "the world's retained horizon: reads at an older data commit answer 410 unless a kept point names it; only a greater one replaces it",
      }),
    },
    "data moved a world's retained horizon and prunes the history below it no kept ref reads (docs/adr/0072): intelligence prunes its versioned read model at the same horizon",
  ),
  'storage.check.reported': closed(
    {
      checkId: Uuid,
      schemaVersion: Count,
      seq: Type.Integer({
        minimum: 0,
        description: "the world's newest object write in data's write sequence (0: none)",
      }),
      counts: Type.Record(Type.String(), Count, { description: "live objects per object type (the world's own)" }),
      linkSeq: Type.Optional(
        Type.Integer({ minimum: 0, description: "the world's newest link write in data's write sequence (0: none)" }),
      ),
      links: Type.Optional(
        Type.Record(Type.String(), Count, { description: "live links per link type (the world's own)" }),
      ),
      outboxOldestAgeSeconds: Type.Number({
        minimum: 0,
        description: 'the age in seconds of the oldest outbox row the service has not sent (0: none)',
      }),
    },
    "data's answer to check.requested: what it holds of the world (docs/adr/0032)",
  ),
  'world.tag.positioned': closed(
    {
      service: Type.Literal('data'),
      tag: Text,
      request: Uuid,
      commit: Type.Integer({
        minimum: 0,
        description: 'a commit of the world cut when the request was applied: every write acknowledged before is in it',
      }),
      written: Type.Optional(
        Type.Integer({
          minimum: 0,
          description:
            "the world's own newest write at or before the commit (0: none): once a reader has applied it, it has all of the world's own data the tag names",
        }),
      ),
    },
    "data's position in a world for a tag: the reply to world.tag.requested",
  ),
  'intelligence.world.provisioned': closed(
    {
      service: Type.Union([Type.Literal('data'), Type.Literal('intelligence')]),
      base: Type.Optional(
        closed(
          { world: Text, definitions: Position },
          "a fork's base world and the definition position the copy was taken at",
        ),
      ),
    },
    'intelligence provisioned a world',
  ),
  'intelligence.world.tag.positioned': closed(
    {
      service: Type.Literal('intelligence'),
      tag: Text,
      request: Uuid,
      dataSeq: Type.Integer({
        minimum: 0,
        description: "intelligence's watermark in the world: the newest data write it applied",
      }),
      schemaVersion: Type.Integer({ minimum: 0, description: "the world's schema version intelligence applied" }),
    },
    "intelligence's position in a world for a tag: the reply to world.tag.requested",
  ),
  'intelligence.world.dropped': ProvisioningReport("intelligence dropped a world's data"),
  'intelligence.position': closed(
    {
      schemaVersion: Type.Integer({
        minimum: 0,
        description: "the world's schema version applied (0 before the first)",
      }),
      dataSeq: Type.Integer({
        minimum: 0,
        description: "the data watermark: the newest of data's writes applied (0 before the first)",
      }),
    },
    "intelligence's position in a world, announced at most once per interval while it changes (the version vector)",
  ),
  'intelligence.rules.changed': closed(
    {
      rules: Type.Array(Text, { description: "the names of the world's rules after the change, sorted" }),
      definitions: Type.Integer({
        minimum: 0,
        description: "the world's definition position after the change: only a greater one replaces the list",
      }),
    },
    "the rules of a world changed (a PUT, a DELETE, a merge, a fork's copy): control checks a protection's requiredChecks against them (docs/adr/0058)",
  ),
  'intelligence.check.reported': closed(
    {
      checkId: Uuid,
      schemaVersion: Count,
      dataSeq: Type.Integer({ minimum: 0, description: "the data watermark: the newest of data's writes applied" }),
      counts: Type.Record(Type.String(), Count, { description: "live objects per object type (the world's own)" }),
      links: Type.Optional(
        Type.Record(Type.String(), Count, {
          description: "live links per link type in the read model (the world's own)",
        }),
      ),
      staleDerived: Type.Array(Type.String(), {
        description: 'derived properties with a value or a pending recompute older than their maximum staleness',
      }),
      outboxOldestAgeSeconds: Type.Number({
        minimum: 0,
        description: 'the age in seconds of the oldest outbox row the service has not sent (0: none)',
      }),
    },
    "intelligence's answer to check.requested: what its read model holds of the world (docs/adr/0032)",
  ),
  'object.created': objectChange('an object was created'),
  'object.updated': objectChange('an object was changed'),
  'object.deleted': objectChange('an object was deleted (after is null)'),
  'object.announced': closed(
    {
      type: Type.String({ minLength: 1, description: 'the object type' }),
      pk: Type.String({ minLength: 1, description: "the object's primary key" }),
      version: Type.Integer({ minimum: 1, description: "the object's current version" }),
      after: Properties,
      actor: Actor,
      requestId: RequestId,
      schemaVersion: Type.Integer({ minimum: 0, description: 'the world schema version the object was written with' }),
    },
    'data re-announces a live object as it is (an operator recount): applied only by a consumer that lacks this version',
  ),
  'link.created': linkChange('a link was created'),
  'link.deleted': linkChange('a link was deleted'),
  'link.announced': closed(
    {
      type: Type.String({ minLength: 1, description: 'the link type' }),
      pk: Type.String({ minLength: 1, description: "the link's own key: its two ends' primary keys" }),
      from: LinkEnd,
      to: LinkEnd,
      version: Type.Integer({ minimum: 1, description: "the link's current version" }),
      actor: Actor,
      requestId: RequestId,
    },
    'data re-announces a live link as it is (a link recount): applied only by a consumer that lacks this version',
  ),
  'series.points.written': closed(
    {
      type: Type.String({ minLength: 1, description: 'the object type' }),
      pk: Type.String({ minLength: 1, description: "the object's primary key" }),
      series: Type.String({ minLength: 1, description: 'the time-series property' }),
      points: Type.Array(
        closed(
          {
            time: Instant,
            value: Type.Union([Type.Number(), Type.Boolean(), Type.String()], {
              description: "the point's value, of the series' type",
            }),
          },
          'one point as written',
        ),
        { minItems: 1, description: 'the points the batch added or changed (a repeated point is left out), by time' },
      ),
      actor: Actor,
      requestId: RequestId,
      schemaVersion: Type.Integer({ minimum: 0, description: 'the world schema version the points were checked with' }),
      writtenAt: WrittenAt,
    },
    "points of one object's series were written (one event per batch, at most 1000 points)",
  ),
  'alert.raised': closed(
    { ...AlertFields, status: Type.Literal('OPEN'), objectVersion: Count },
    "a rule's condition became true for an object",
  ),
  'alert.cleared': closed(
    {
      ...AlertFields,
      status: Type.Literal('CLEARED'),
      objectVersion: Nullable(Count),
      clearedAt: Nullable(Instant),
      reason: Nullable(Type.String()),
    },
    'an open alert was cleared',
  ),
  'decision.made': closed(DecisionFields, 'a decision was recorded for an alert'),
  'decision.executed': closed(DecisionFields, "a decision's action was started, or failed to start"),
  'action.requested': closed(
    {
      actionId: Uuid,
      actionType: Text,
      parameters: Type.Record(Type.String(), Type.Unknown()),
      steps: Type.Array(StepCommandSchema),
      actor: Text,
      cause: Nullable(Type.String()),
    },
    'an action was started; its steps follow as action.step.requested',
  ),
  'action.step.requested': closedCopy(StepRequestedSchema, 'data is asked to apply one step of an action'),
  'action.step.completed': closedCopy(StepCompletedSchema, 'data applied a step'),
  'action.step.refused': closedCopy(StepRefusedSchema, 'data refused a step; nothing of it was applied'),
  'action.completed': actionEnd('every step of an action was applied'),
  'action.compensated': actionEnd('an action was refused and its applied steps undone'),
  'action.failed': actionEnd('an action could not be completed nor compensated'),
  'merge.planned': DATA_MERGE.planned,
  'merge.conflicts.found': DATA_MERGE.conflictsFound,
  'merge.applied': DATA_MERGE.applied,
  'merge.failed': DATA_MERGE.failed,
  'merge.compensated': DATA_MERGE.compensated,
  'merge.verified': DATA_MERGE.verified,
  'merge.staged': closed(
    { merge: MergeId, service: Type.Literal('data'), ...CHECK_CHUNK, objects: StagedObjects },
    "the objects a proposal's plan would create or change in the target, as they would be after the merge, in chunks of at most 200 (docs/adr/0085)",
  ),
  'intelligence.merge.planned': INTELLIGENCE_MERGE.planned,
  'intelligence.merge.conflicts.found': INTELLIGENCE_MERGE.conflictsFound,
  'intelligence.merge.applied': INTELLIGENCE_MERGE.applied,
  'intelligence.merge.failed': INTELLIGENCE_MERGE.failed,
  'intelligence.merge.compensated': INTELLIGENCE_MERGE.compensated,
  'intelligence.merge.verified': INTELLIGENCE_MERGE.verified,
  'intelligence.merge.checked': closed(
    {
      merge: MergeId,
      service: Type.Literal('intelligence'),
      ...CHECK_CHUNK,
      results: Type.Array(
        closed(
          {
            rule: Text,
            fired: Type.Array(closed({ type: Text, pk: Text }, 'an object the rule fired on'), {
              maxItems: 200,
              description: 'the objects of the chunk the rule fired on',
            }),
            error: Type.Optional(Type.String({ description: 'why the rule could not be evaluated: the check fails' })),
          },
          'one required check on one chunk',
        ),
        { maxItems: 50 },
      ),
    },
    'the required checks of a proposal on one chunk of its objects: each rule, and the objects it fired on (docs/adr/0085)',
  ),
  'audit.recorded': AuditRecordedPayload,
} as const satisfies Record<EventType, TSchema>;

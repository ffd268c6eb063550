-- Merge proposals (issue 32 item 3, docs/adr/0085): a merge into a world whose protection asks for
-- approvals stops at PROPOSED with its plan and conflicts; owners other than its author approve it.
-- A write to the target or the source after the plan read them sends it back for a new plan: a new
-- round, planned by data and intelligence under a new plan id (they know a plan by its id, and
-- answer a repeated request with the same plan), with the approvals of the old round void.
ALTER TABLE merges DROP CONSTRAINT merges_status_check;
ALTER TABLE merges ADD CONSTRAINT merges_status_check
  CHECK (status IN ('RUNNING', 'CONFLICTS', 'PROPOSED', 'MERGED', 'FAILED', 'COMPENSATED'));
ALTER TABLE merges DROP CONSTRAINT merges_phase_check;
ALTER TABLE merges ADD CONSTRAINT merges_phase_check
  CHECK (phase IN ('planning', 'conflicts', 'proposed', 'applying', 'compensating', 'done'));
-- The id data and intelligence know the current plan by: the merge's own id for the first round.
ALTER TABLE merges ADD COLUMN plan_id uuid;
UPDATE merges SET plan_id = id;
ALTER TABLE merges ALTER COLUMN plan_id SET NOT NULL;
CREATE UNIQUE INDEX merges_plan_id ON merges (plan_id);
-- The plan round (0: the first plan) and why the last new plan was asked for: {round, reason, at}.
ALTER TABLE merges ADD COLUMN round integer NOT NULL DEFAULT 0;
ALTER TABLE merges ADD COLUMN sent_back jsonb;
CREATE INDEX merges_proposed ON merges (target) WHERE status = 'PROPOSED';
CREATE INDEX merges_proposed_source ON merges (source) WHERE status = 'PROPOSED';

-- Approvals of a proposal, per round: one per owner; a new round starts with none.
CREATE TABLE merge_approvals (
  merge_id    uuid        NOT NULL REFERENCES merges (id),
  round       integer     NOT NULL,
  approver    text        NOT NULL,
  approved_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (merge_id, round, approver)
);

-- A proposal's required checks (the target's requiredChecks), for its current plan:
-- {planId, required, state: running|passed|failed, results: [{rule, fired, firedCount, errors}], ranAt}.
ALTER TABLE merges ADD COLUMN checks jsonb;
-- intelligence's answers, one per chunk of the objects data staged, until every chunk is in.
CREATE TABLE merge_check_chunks (
  merge_id uuid    NOT NULL REFERENCES merges (id),
  plan_id  uuid    NOT NULL,
  chunk    integer NOT NULL,
  chunks   integer NOT NULL,
  results  jsonb   NOT NULL,
  PRIMARY KEY (plan_id, chunk)
);
CREATE INDEX merge_check_chunks_merge ON merge_check_chunks (merge_id);

-- The steps of intelligence's actions this service applied (consumer data-actions on
-- domain.actions): one row per action, step and phase, written in the transaction that applies
-- the step, with the reply sent. A step asked for again, under another event, gets the same
-- reply and is never applied twice.
CREATE TABLE action_steps (
  world_id   text        NOT NULL,
  action_id  uuid        NOT NULL,
  step       integer     NOT NULL CHECK (step >= 0),
  phase      text        NOT NULL CHECK (phase IN ('forward', 'compensation')),
  -- The action.step.requested event the step was applied for.
  request_id uuid        NOT NULL,
  outcome    text        NOT NULL CHECK (outcome IN ('completed', 'refused')),
  -- The payload of the action.step.completed or action.step.refused event sent.
  reply      jsonb       NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, action_id, step, phase)
);

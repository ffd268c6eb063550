-- Actions at a ref (docs/adr/0078): every state an action and its steps had, placed on the two
-- axes the other reads at a ref use — the data commit and intelligence's moment (intelligence_seq).

-- data's write sequence the step's last completed reply named (action.step.completed's `seq`,
-- forward or compensation): the data commit from which its edits are in data. NULL before one.
ALTER TABLE action_steps ADD COLUMN reply_seq bigint;

-- One row per committed transition of an action (its revision): the moment it was recorded
-- (`seq`) and the data commit it belongs to (`data_seq`): the greatest of the world's data
-- watermark then, the commits the action's step replies named, and its previous version's (so
-- both never decrease along an action's versions). At a point (c, m) an action is its newest
-- version with data_seq <= c and seq <= m; none: not started by then. The current state is a
-- version too (the newest).
CREATE TABLE action_versions (
  world_id    text        NOT NULL,
  action_id   uuid        NOT NULL,
  revision    integer     NOT NULL,
  seq         bigint      NOT NULL,
  data_seq    bigint      NOT NULL,
  status      text        NOT NULL,
  refusal     jsonb,
  updated_at  timestamptz NOT NULL,
  finished_at timestamptz,
  PRIMARY KEY (world_id, action_id, revision),
  FOREIGN KEY (world_id, action_id) REFERENCES actions (world_id, id) ON DELETE CASCADE
);

-- A step's state as of the action's revision that changed it: at revision r a step is its newest
-- row with revision <= r. A transition that only asks again (a new request event) writes none.
CREATE TABLE action_step_versions (
  world_id             text    NOT NULL,
  action_id            uuid    NOT NULL,
  n                    integer NOT NULL,
  revision             integer NOT NULL,
  state                text    NOT NULL,
  result               jsonb,
  refusal              jsonb,
  compensation         jsonb,
  compensation_result  jsonb,
  compensation_refusal jsonb,
  PRIMARY KEY (world_id, action_id, n, revision),
  FOREIGN KEY (world_id, action_id) REFERENCES actions (world_id, id) ON DELETE CASCADE
);

-- Records the action's state as its transaction commits: a deferred trigger, so the steps a
-- transition changed (before or after the action's row) are all there, one moment per
-- transition, and no writer can forget it.
CREATE FUNCTION keep_action_version() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  a actions;
  prior action_versions;
BEGIN
  SELECT * INTO a FROM actions WHERE world_id = NEW.world_id AND id = NEW.id;
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT * INTO prior FROM action_versions
   WHERE world_id = a.world_id AND action_id = a.id ORDER BY revision DESC LIMIT 1;
  IF FOUND AND prior.revision >= a.revision THEN RETURN NULL; END IF;
  INSERT INTO action_versions (world_id, action_id, revision, seq, data_seq, status, refusal, updated_at, finished_at)
  VALUES (a.world_id, a.id, a.revision, nextval('intelligence_seq'),
          greatest(coalesce(prior.data_seq, 0),
                   coalesce((SELECT seq FROM data_watermarks WHERE world_id = a.world_id), 0),
                   coalesce((SELECT max(reply_seq) FROM action_steps WHERE world_id = a.world_id AND action_id = a.id), 0)),
          a.status, a.refusal, a.updated_at, a.finished_at);
  INSERT INTO action_step_versions (world_id, action_id, n, revision, state, result, refusal, compensation,
                                    compensation_result, compensation_refusal)
  SELECT s.world_id, s.action_id, s.n, a.revision, s.state, s.result, s.refusal, s.compensation,
         s.compensation_result, s.compensation_refusal
    FROM action_steps s
   WHERE s.world_id = a.world_id AND s.action_id = a.id
     AND NOT EXISTS (
       SELECT 1 FROM (SELECT * FROM action_step_versions v
                       WHERE v.world_id = s.world_id AND v.action_id = s.action_id AND v.n = s.n
                       ORDER BY v.revision DESC LIMIT 1) l
        WHERE (l.state, l.result, l.refusal, l.compensation, l.compensation_result, l.compensation_refusal)
              IS NOT DISTINCT FROM
              (s.state, s.result, s.refusal, s.compensation, s.compensation_result, s.compensation_refusal));
  RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER actions_keep_versions AFTER INSERT OR UPDATE ON actions
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keep_action_version();

-- Actions started before this migration: their state now, at the world's watermark now. A read
-- at an earlier ref does not list them (their past states were not kept).
INSERT INTO action_versions (world_id, action_id, revision, seq, data_seq, status, refusal, updated_at, finished_at)
SELECT a.world_id, a.id, a.revision, nextval('intelligence_seq'), coalesce(w.seq, 0), a.status, a.refusal,
       a.updated_at, a.finished_at
  FROM actions a LEFT JOIN data_watermarks w ON w.world_id = a.world_id;
INSERT INTO action_step_versions (world_id, action_id, n, revision, state, result, refusal, compensation,
                                  compensation_result, compensation_refusal)
SELECT s.world_id, s.action_id, s.n, a.revision, s.state, s.result, s.refusal, s.compensation,
       s.compensation_result, s.compensation_refusal
  FROM action_steps s JOIN actions a ON a.world_id = s.world_id AND a.id = s.action_id;

-- The actions a world lists at a point (data commit c and moment m; NULL: no bound), with the
-- revision each had then: its own (depth 0), and through its chain each base's as of the fork
-- point — the least data point and moment on the way, as alerts are inherited (docs/adr/0045) —
-- so an action a base started, or a state it reached, after the fork is never a fork's. `one`:
-- that action alone (NULL: all).
CREATE FUNCTION actions_at(w text, c bigint, m bigint, one uuid)
RETURNS TABLE (world_id text, action_id uuid, revision integer, depth integer)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE ch(world_id, point, moment, depth) AS (
    SELECT w, c, m, 0
    UNION ALL
    SELECT b.base_world, least(b.base_seq, ch.point), least(f.moment, ch.moment), ch.depth + 1
      FROM ch JOIN world_bases b ON b.world_id = ch.world_id
      LEFT JOIN fork_points f ON f.world_id = ch.world_id
     WHERE ch.depth < 64
  )
  SELECT DISTINCT ON (v.world_id, v.action_id) v.world_id, v.action_id, v.revision, ch.depth
    FROM ch JOIN action_versions v ON v.world_id = ch.world_id
   WHERE (ch.point IS NULL OR v.data_seq <= ch.point) AND (ch.moment IS NULL OR v.seq <= ch.moment)
     AND (one IS NULL OR v.action_id = one)
   ORDER BY v.world_id, v.action_id, v.revision DESC
$$;

-- The history pruner (docs/adr/0073) walks actions' versions as the pass's table 4, after the
-- definitions (readmodel/action-history.ts).

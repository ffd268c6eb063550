-- Webhooks (docs/adr/0060): a world's subscriptions by HTTP, the deliveries still to make (the
-- queue, claimed with FOR UPDATE SKIP LOCKED by run_at) and dead-lettered, and each attempt's log.
CREATE TABLE webhooks (
  world_id        text        NOT NULL,
  name            text        NOT NULL,
  url             text        NOT NULL,
  events          text[]      NOT NULL,
  filter          text[]      NOT NULL DEFAULT '{}',
  active          boolean     NOT NULL DEFAULT true,
  -- whsec_<base64>: shown once when made or rotated.
  secret          text        NOT NULL,
  -- During a rotation the previous secret signs too, until previous_until.
  previous_secret text,
  previous_until  timestamptz,
  -- Since when every attempt failed (null after a success); past WEBHOOK_DISABLE_AFTER_HOURS the
  -- webhook is made inactive with the reason.
  failing_since   timestamptz,
  disabled_reason text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, name)
);

CREATE TABLE webhook_deliveries (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  world_id     text        NOT NULL,
  webhook      text        NOT NULL,
  event_id     uuid        NOT NULL,
  event_type   text        NOT NULL,
  -- The event's partition key: a key's deliveries go one at a time, in order.
  ordering_key text        NOT NULL,
  body         text        NOT NULL,
  state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
  attempts     integer     NOT NULL DEFAULT 0,
  run_at       timestamptz NOT NULL DEFAULT now(),
  created_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz,
  last_error   text,
  UNIQUE (world_id, webhook, event_id),
  FOREIGN KEY (world_id, webhook) REFERENCES webhooks ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (run_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_lane ON webhook_deliveries (world_id, webhook, ordering_key, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_dead ON webhook_deliveries (world_id, webhook, id) WHERE state = 'dead';
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries USING brin (finished_at);

CREATE TABLE webhook_attempts (
  id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  delivery_id bigint      NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
  world_id    text        NOT NULL,
  webhook     text        NOT NULL,
  attempt     integer     NOT NULL,
  at          timestamptz NOT NULL DEFAULT now(),
  status      integer,
  latency_ms  integer     NOT NULL,
  -- At most 1 KB of what the receiver answered.
  response    text,
  error       text
);
CREATE INDEX webhook_attempts_log ON webhook_attempts (world_id, webhook, id DESC);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id);

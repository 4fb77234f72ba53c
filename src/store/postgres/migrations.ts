/**
 * Versioned PostgreSQL migrations. `schema_version` holds one row per applied migration;
 * the database is at the highest version in it. Never edit a released migration: add the
 * next one. The tables mirror the SQLite schema (src/store/sqlite/migrations.ts), column
 * for column, so one row mapping serves both; times are milliseconds since the epoch
 * (bigint), as on SQLite, because they are always passed in (tests move time in SQL).
 *
 * Differences from SQLite, each for a reason:
 * - events: PRIMARY KEY (source, delivery_id) is the dedupe decision
 *   (`INSERT ... ON CONFLICT DO NOTHING`); `id` is a separate identity, the receiver's
 *   event id, unique and used by replay, `events show` and the drain's arrival order.
 * - a BRIN index on received_at for purge: rows arrive in received_at order, so a
 *   block-range index is tiny and finds old rows without a B-tree on every insert.
 * - headers and extra_ids are jsonb; body is bytea.
 * - events_due is ordered by id (the drain's claim order), not by next_attempt_at.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'initial',
    sql: `
CREATE TABLE events (
  id bigint GENERATED ALWAYS AS IDENTITY,
  source text NOT NULL,
  delivery_id text NOT NULL,
  event_type text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'done', 'dead')),
  received_at bigint NOT NULL,
  headers jsonb,
  body bytea,
  body_sha256 text NOT NULL,
  extra_ids jsonb,
  response_status integer NOT NULL,
  response_body text,
  duplicates integer NOT NULL DEFAULT 0,
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_owner text,
  lease_expires_at bigint,
  last_error text,
  finished_at bigint,
  force_effects integer NOT NULL DEFAULT 0,
  PRIMARY KEY (source, delivery_id),
  UNIQUE (id)
);
CREATE INDEX events_received_brin ON events USING brin (received_at);
-- The drain claims the oldest due pending event by id: walk pending ids in order.
CREATE INDEX events_due ON events (id) INCLUDE (next_attempt_at) WHERE status = 'pending';
CREATE INDEX events_leased ON events (lease_expires_at) WHERE status = 'processing';
-- Tiered retention (purge --bodies-days) finds finished events that still carry a body.
CREATE INDEX events_finished_bodies ON events (received_at) WHERE status = 'done' AND body IS NOT NULL;
CREATE INDEX events_dead ON events (id) WHERE status = 'dead';
CREATE TABLE conflicts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id bigint NOT NULL,
  source text NOT NULL,
  delivery_id text NOT NULL,
  received_at bigint NOT NULL,
  body_sha256 text NOT NULL,
  headers jsonb,
  body bytea
);
CREATE INDEX conflicts_event ON conflicts (event_id);
CREATE TABLE effects (
  effect_key text PRIMARY KEY,
  route text NOT NULL,
  business_key text NOT NULL,
  status text NOT NULL CHECK (status IN ('running', 'done', 'failed')),
  event_id bigint,
  version text,
  runs integer NOT NULL DEFAULT 0,
  run_token text,
  started_at bigint,
  finished_at bigint,
  last_error text,
  forced_runs integer NOT NULL DEFAULT 0
);
CREATE TABLE attempts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id bigint NOT NULL,
  attempt integer NOT NULL,
  route text NOT NULL,
  effect_key text,
  started_at bigint NOT NULL,
  finished_at bigint,
  outcome text NOT NULL,
  error text,
  output text,
  forced integer NOT NULL DEFAULT 0
);
CREATE INDEX attempts_event ON attempts (event_id);
CREATE INDEX attempts_effect ON attempts (effect_key);
`,
  },
  {
    version: 2,
    name: 'conflict repeats',
    // As SQLite's version 2: each differing body once per event, its repeats counted.
    sql: `
ALTER TABLE conflicts ADD COLUMN repeats integer NOT NULL DEFAULT 0;
UPDATE conflicts AS c SET repeats = d.n - 1
  FROM (SELECT min(id) AS id, count(*) AS n FROM conflicts GROUP BY event_id, body_sha256) AS d
  WHERE c.id = d.id AND d.n > 1;
DELETE FROM conflicts WHERE id NOT IN (SELECT min(id) FROM conflicts GROUP BY event_id, body_sha256);
DROP INDEX conflicts_event;
CREATE UNIQUE INDEX conflicts_event_body ON conflicts (event_id, body_sha256);
`,
  },
  {
    version: 3,
    name: 'catch-up',
    // As SQLite's version 3: events fetched from the sender's API, and catch-up state per source.
    sql: `
ALTER TABLE events ADD COLUMN origin text NOT NULL DEFAULT 'webhook' CHECK (origin IN ('webhook', 'catch-up'));
CREATE TABLE catch_up (
  source text PRIMARY KEY,
  configured_at bigint NOT NULL,
  resume_at bigint,
  resume_cursor text,
  last_run_at bigint,
  last_ok_at bigint,
  last_error text,
  last_counts text
);
`,
  },
  {
    version: 4,
    name: 'route decisions',
    // As SQLite's version 4: why each route did or did not apply to the event.
    sql: `
ALTER TABLE events ADD COLUMN route_decisions text;
`,
  },
  {
    version: 5,
    name: 'run keys',
    // As SQLite's version 5: the key each effect run was sent with.
    sql: `
ALTER TABLE attempts ADD COLUMN run_key text;
`,
  },
  {
    version: 6,
    name: 'test deliveries and admin sessions',
    // As SQLite's version 6. The wider CHECK is added NOT VALID: every stored row meets the
    // narrower one it replaces, so no scan of the table is needed to know it meets this one.
    sql: `
ALTER TABLE events DROP CONSTRAINT events_origin_check;
ALTER TABLE events ADD CONSTRAINT events_origin_check CHECK (origin IN ('webhook', 'catch-up', 'test')) NOT VALID;
CREATE TABLE admin_sessions (
  id text PRIMARY KEY,
  expires_at bigint NOT NULL
);
`,
  },
  {
    version: 7,
    name: 'body keys',
    // As SQLite's version 7: the body keys of sources that dedupe by body, those of the
    // last 72 hours' events filled in.
    sql: `
CREATE TABLE body_keys (
  source text NOT NULL,
  body_sha256 text NOT NULL,
  event_id bigint NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (source, body_sha256)
);
CREATE INDEX body_keys_event ON body_keys (event_id);
INSERT INTO body_keys (source, body_sha256, event_id, expires_at)
  SELECT source, body_sha256, id, received_at + 259200000 FROM events
  WHERE received_at > (SELECT max(received_at) FROM events) - 259200000 ORDER BY id
  ON CONFLICT DO NOTHING;
`,
  },
  {
    version: 8,
    name: 'alerts',
    // As SQLite's version 8: alerts, their sends, and the index the failing check reads.
    sql: `
CREATE TABLE alerts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  alert_key text NOT NULL,
  kind text NOT NULL,
  status text NOT NULL CHECK (status IN ('firing', 'resolved')),
  summary text NOT NULL,
  source text,
  route text,
  event_id bigint,
  delivery_id text,
  error text,
  fired_at bigint NOT NULL,
  resolved_at bigint
);
CREATE UNIQUE INDEX alerts_firing ON alerts (alert_key) WHERE status = 'firing';
CREATE INDEX alerts_key ON alerts (alert_key, id);
CREATE TABLE alert_sends (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  alert_id bigint NOT NULL,
  transition text NOT NULL CHECK (transition IN ('firing', 'resolved')),
  destination text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'suppressed', 'failed')),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_owner text,
  lease_expires_at bigint,
  sent_at bigint,
  last_error text,
  summary_id bigint,
  UNIQUE (alert_id, transition, destination)
);
CREATE INDEX alert_sends_due ON alert_sends (next_attempt_at) WHERE status IN ('pending', 'sending');
CREATE INDEX alert_sends_sent ON alert_sends (destination, sent_at) WHERE status = 'sent';
CREATE INDEX alert_sends_suppressed ON alert_sends (destination, id) WHERE status = 'suppressed' AND summary_id IS NULL;
CREATE INDEX attempts_route ON attempts (route, id);
`,
  },
  {
    version: 9,
    name: 'units and lanes',
    // As SQLite's version 9: one unit of work per (event, route), in a lane; events planned by the drain.
    sql: `
ALTER TABLE events ADD COLUMN planned integer NOT NULL DEFAULT 0;
CREATE TABLE units (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id bigint NOT NULL,
  route text NOT NULL,
  lane text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'done', 'dead')),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_owner text,
  lease_expires_at bigint,
  last_error text,
  force_effects integer NOT NULL DEFAULT 0,
  replays integer NOT NULL DEFAULT 0,
  finished_at bigint,
  UNIQUE (event_id, route)
);
CREATE INDEX units_pending ON units (lane, id) WHERE status = 'pending';
CREATE INDEX units_due ON units (next_attempt_at) WHERE status = 'pending';
CREATE INDEX units_leased ON units (lease_expires_at) WHERE status = 'processing';
CREATE INDEX events_unplanned ON events (id) WHERE planned = 0 AND status = 'pending';
UPDATE events SET planned = 1 WHERE status = 'done';
UPDATE events SET status = 'pending', next_attempt_at = greatest(next_attempt_at, coalesce(lease_expires_at, 0)), lease_owner = NULL, lease_expires_at = NULL
  WHERE status = 'processing';
`,
  },
  {
    version: 10,
    name: 'lane due times',
    // As SQLite's version 10: each lane's earliest due time in one probe.
    sql: `
DROP INDEX units_due;
CREATE INDEX units_lane_due ON units (lane, next_attempt_at) WHERE status = 'pending';
`,
  },
];

export const LATEST_VERSION = migrations[migrations.length - 1]?.version ?? 0;

import type { Db } from './open.js';

/**
 * Versioned SQLite migrations. `PRAGMA user_version` holds the version a file is at.
 * Never edit a released migration: add the next one. `schema.sql` at the top of the
 * repository is exactly what these produce (test/store/schema.test.ts compares them).
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** Run after `sql`, in the same transaction: a change SQL alone cannot make (see widenCheck). */
  apply?: (db: Db) => void;
}

/**
 * Replaces `from` with `to` in a table's stored definition, where a CHECK constraint only
 * becomes wider (every stored row still meets it), so no row needs rewriting. SQLite's
 * ALTER TABLE cannot change a CHECK; this is the procedure its documentation gives for
 * such changes ("Making Other Kinds Of Table Schema Changes"): edit sqlite_schema with
 * writable_schema on, inside the caller's transaction, and bump schema_version so every
 * connection reads the new definition. Rebuilding the table instead would copy every body
 * once more into the WAL, on the operator's disk, at upgrade.
 */
function widenCheck(db: Db, table: string, from: string, to: string): void {
  const sql = db.prepare(`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?`).pluck().get(table) as string | undefined;
  if (sql === undefined || sql.split(from).length !== 2) throw new Error(`migration: the ${table} table's definition does not hold ${from} exactly once`);
  const version = db.pragma('schema_version', { simple: true }) as number;
  // better-sqlite3's defensive mode forbids writing sqlite_schema; lifted for this one statement.
  db.unsafeMode(true);
  try {
    db.pragma('writable_schema = ON');
    db.prepare(`UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?`).run(sql.replace(from, to), table);
    db.pragma(`schema_version = ${version + 1}`);
    db.pragma('writable_schema = OFF');
  } finally {
    db.unsafeMode(false);
  }
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'initial',
    sql: `
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  source TEXT NOT NULL,
  delivery_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'done', 'dead')),
  received_at INTEGER NOT NULL,
  headers TEXT,
  body BLOB,
  body_sha256 TEXT NOT NULL,
  extra_ids TEXT,
  response_status INTEGER NOT NULL,
  response_body TEXT,
  duplicates INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  lease_owner TEXT,
  lease_expires_at INTEGER,
  last_error TEXT,
  finished_at INTEGER,
  force_effects INTEGER NOT NULL DEFAULT 0,
  UNIQUE (source, delivery_id)
);
CREATE INDEX events_due ON events (next_attempt_at, id) WHERE status = 'pending';
-- The drain claims the oldest due event in id order: walk pending events by id, stop at the first due.
CREATE INDEX events_pending ON events (id, next_attempt_at) WHERE status = 'pending';
CREATE INDEX events_leased ON events (lease_expires_at) WHERE status = 'processing';
CREATE INDEX events_finished ON events (received_at) WHERE status = 'done';
-- Tiered retention (purge --bodies-days) finds finished events that still carry a body.
CREATE INDEX events_finished_bodies ON events (received_at) WHERE status = 'done' AND body IS NOT NULL;
CREATE INDEX events_dead ON events (id) WHERE status = 'dead';
CREATE TABLE conflicts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id INTEGER NOT NULL,
  source TEXT NOT NULL,
  delivery_id TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  body_sha256 TEXT NOT NULL,
  headers TEXT,
  body BLOB
);
CREATE INDEX conflicts_event ON conflicts (event_id);
CREATE TABLE effects (
  effect_key TEXT PRIMARY KEY,
  route TEXT NOT NULL,
  business_key TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
  event_id INTEGER,
  version TEXT,
  runs INTEGER NOT NULL DEFAULT 0,
  run_token TEXT,
  started_at INTEGER,
  finished_at INTEGER,
  last_error TEXT,
  forced_runs INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE attempts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  route TEXT NOT NULL,
  effect_key TEXT,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  outcome TEXT NOT NULL,
  error TEXT,
  output TEXT,
  forced INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX attempts_event ON attempts (event_id);
CREATE INDEX attempts_effect ON attempts (effect_key);
`,
  },
  {
    version: 2,
    name: 'conflict repeats',
    // A sender repeating one conflicting delivery (same id, same differing body) added a
    // row, body included, on every try. Now each differing body is stored once per event
    // and its repeats are counted. Rows written before: the first of each body is kept,
    // the later ones become its count.
    sql: `
ALTER TABLE conflicts ADD COLUMN repeats INTEGER NOT NULL DEFAULT 0;
UPDATE conflicts SET repeats = (SELECT count(*) - 1 FROM conflicts AS c WHERE c.event_id = conflicts.event_id AND c.body_sha256 = conflicts.body_sha256)
  WHERE id IN (SELECT min(id) FROM conflicts GROUP BY event_id, body_sha256);
DELETE FROM conflicts WHERE id NOT IN (SELECT min(id) FROM conflicts GROUP BY event_id, body_sha256);
DROP INDEX conflicts_event;
-- The conflict record's identity, for INSERT ... ON CONFLICT; it also finds an event's conflicts.
CREATE UNIQUE INDEX conflicts_event_body ON conflicts (event_id, body_sha256);
`,
  },
  {
    version: 3,
    name: 'catch-up',
    // origin: 'webhook' (a delivery that came in through POST /webhooks/:source) or
    // 'catch-up' (fetched from the sender's API by `receiver catch-up`, not signed). A later
    // signed delivery of a fetched event is a duplicate whatever its body hash (the API's
    // JSON need not be byte-identical to the webhook body). catch_up: one row per source,
    // when catch-up was first configured and where the next run resumes (resume_cursor:
    // the older part a run stopped short of, JSON, see src/store/catch-up-types.ts).
    sql: `
ALTER TABLE events ADD COLUMN origin TEXT NOT NULL DEFAULT 'webhook' CHECK (origin IN ('webhook', 'catch-up'));
CREATE TABLE catch_up (
  source TEXT PRIMARY KEY,
  configured_at INTEGER NOT NULL,
  resume_at INTEGER,
  resume_cursor TEXT,
  last_run_at INTEGER,
  last_ok_at INTEGER,
  last_error TEXT,
  last_counts TEXT
);
`,
  },
  {
    version: 4,
    name: 'route decisions',
    // Why each route did or did not apply to the event, one line per route: written when
    // it is stored done because none applied, and when the drain plans its effects.
    sql: `
ALTER TABLE events ADD COLUMN route_decisions TEXT;
`,
  },
  {
    version: 5,
    name: 'run keys',
    // run_key: the key an effect run was sent with (Idempotency-Key, webhook-id, exec's
    // RECEIVER_RUN_KEY, a module's ctx.runKey are derived from it): the effect key for an
    // ordinary run, `<effect key>#forced-<n>` for a forced one. NULL on attempts that ran
    // nothing (skipped, stale, busy, a key template that resolved to nothing) and on rows
    // written before this version.
    sql: `
ALTER TABLE attempts ADD COLUMN run_key TEXT;
`,
  },
  {
    version: 6,
    name: 'test deliveries and admin sessions',
    // origin 'test': a delivery `receiver send-test` signed and marked as a test (see
    // src/http/test-mark.ts). admin_sessions: the admin pages' live sessions, by the SHA-256
    // of the cookie's nonce; logging out deletes the row, so the cookie stops working at once.
    sql: `
CREATE TABLE admin_sessions (
  id TEXT PRIMARY KEY,
  expires_at INTEGER NOT NULL
);
`,
    apply: (db) => widenCheck(db, 'events', "CHECK (origin IN ('webhook', 'catch-up'))", "CHECK (origin IN ('webhook', 'catch-up', 'test'))"),
  },
  {
    version: 7,
    name: 'body keys',
    // One row per (source, body hash) of an event stored by a source that dedupes by body,
    // until the retry horizon ends (expires_at): the same body under a new delivery id is
    // then answered with event_id's stored answer. Purge deletes a key with its event, and
    // expired keys. The index on event_id serves both. Events of the last 72 hours before
    // the upgrade (GitHub's horizon, the longest of the senders whose ids are unsigned) get
    // a key, the first event of each body: a key of a source that does not dedupe by body is
    // never consulted, and goes when it expires.
    sql: `
CREATE TABLE body_keys (
  source TEXT NOT NULL,
  body_sha256 TEXT NOT NULL,
  event_id INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (source, body_sha256)
) WITHOUT ROWID;
CREATE INDEX body_keys_event ON body_keys (event_id);
INSERT OR IGNORE INTO body_keys (source, body_sha256, event_id, expires_at)
  SELECT source, body_sha256, id, received_at + 259200000 FROM events
  WHERE received_at > (SELECT max(received_at) FROM events) - 259200000 ORDER BY id;
`,
  },
  {
    version: 8,
    name: 'alerts',
    // alerts: one row per alert (an alert key's firing, until it is resolved); at most one
    // firing row per key (alerts_firing), so of several receivers that see the same failure
    // one stores it. alert_sends: one row per alert, transition (firing, resolved) and
    // destination, claimed under a lease like an event, so each goes out once; `suppressed`
    // past the destination's maxPerHour, counted into a summary (summary_id) instead.
    // attempts_route: the failing check reads each route's newest attempts.
    sql: `
CREATE TABLE alerts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  alert_key TEXT NOT NULL,
  kind TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('firing', 'resolved')),
  summary TEXT NOT NULL,
  source TEXT,
  route TEXT,
  event_id INTEGER,
  delivery_id TEXT,
  error TEXT,
  fired_at INTEGER NOT NULL,
  resolved_at INTEGER
);
CREATE UNIQUE INDEX alerts_firing ON alerts (alert_key) WHERE status = 'firing';
CREATE INDEX alerts_key ON alerts (alert_key, id);
CREATE TABLE alert_sends (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  alert_id INTEGER NOT NULL,
  transition TEXT NOT NULL CHECK (transition IN ('firing', 'resolved')),
  destination TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'suppressed', 'failed')),
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  lease_owner TEXT,
  lease_expires_at INTEGER,
  sent_at INTEGER,
  last_error TEXT,
  summary_id INTEGER,
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
    // One unit of work per (event, route) that applies: its own status, attempts, next
    // attempt, lease and last error, in a lane (the route's `lane`, by default its name).
    // The event's status is derived from its units' (drain/settle.ts). The drain plans an
    // event's units (`planned`), never ingest. Events not finished before this version
    // are planned by the drain from the routes configured then: a pending one keeps its
    // attempts and next attempt time, a claimed one becomes pending no sooner than its
    // lease ends, a dead one stays dead until it is replayed. The ledger keeps done
    // effects from running again.
    sql: `
ALTER TABLE events ADD COLUMN planned INTEGER NOT NULL DEFAULT 0;
CREATE TABLE units (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id INTEGER NOT NULL,
  route TEXT NOT NULL,
  lane TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'done', 'dead')),
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  lease_owner TEXT,
  lease_expires_at INTEGER,
  last_error TEXT,
  force_effects INTEGER NOT NULL DEFAULT 0,
  replays INTEGER NOT NULL DEFAULT 0,
  finished_at INTEGER,
  UNIQUE (event_id, route)
);
-- A lane's oldest pending unit first.
CREATE INDEX units_pending ON units (lane, id) WHERE status = 'pending';
CREATE INDEX units_due ON units (next_attempt_at) WHERE status = 'pending';
CREATE INDEX units_leased ON units (lease_expires_at) WHERE status = 'processing';
CREATE INDEX events_unplanned ON events (id) WHERE planned = 0 AND status = 'pending';
UPDATE events SET planned = 1 WHERE status = 'done';
UPDATE events SET status = 'pending', next_attempt_at = max(next_attempt_at, coalesce(lease_expires_at, 0)), lease_owner = NULL, lease_expires_at = NULL
  WHERE status = 'processing';
`,
  },
  {
    version: 10,
    name: 'lane due times',
    // Each lane's earliest due time in one probe, in place of one index of every pending
    // unit by due time: the drain asks it of every lane with pending work when it claims
    // and when it decides how long to sleep, and a lane's backlog must not make that cost
    // grow with it.
    sql: `
DROP INDEX units_due;
CREATE INDEX units_lane_due ON units (lane, next_attempt_at) WHERE status = 'pending';
`,
  },
];

export const LATEST_VERSION = migrations[migrations.length - 1]?.version ?? 0;

/**
 * Crash loop: signed deliveries (a share of them re-sent duplicates) go to a real
 * `receiver serve` child while it is killed with SIGKILL at random moments and restarted.
 * Effects run in four lanes side by side: two exec routes, one fast (`fulfil`, every order)
 * and one slow (`deploy`, one order in ten), each appending "<business key> <event id>
 * <attempt>" to a file of its own, so each file is an independent record of every run that
 * actually happened, to be compared with the effect ledger, and each taking a lock (flock)
 * for its run, so a lane that ever ran two units at once is seen; a transactional module
 * effect (`record`, every order); and a hostile module (`hostile`, one order in twenty) that
 * on its first attempt throws from a timer, leaves a rejection unhandled, exits its process,
 * loops forever, throws an error whose message cannot be read, or emits an unheard 'error',
 * and applies on its next one.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeConfig } from '../helpers.js';
import { deliverUntilAcked, inspect, integrityCheck, newTally, RestartableServe, SECRET_ENV, shopSource, type SendTally } from './harness.js';

export interface CrashLoopOptions {
  dir: string;
  kills: number;
  deliveries: number;
  /** Share of the deliveries that re-send an earlier one (same id, same bytes). */
  duplicateShare: number;
  senders: number;
  random: () => number;
  /** Every loop stops here; what is unfinished is reported as a violation. */
  deadline: number;
}

/** The exec routes: each a lane of its own, with its own file of runs. */
const EXEC_ROUTES = ['fulfil', 'deploy'] as const;
type ExecRoute = (typeof EXEC_ROUTES)[number];

/** One kill: when, and which exec effect runs (route, key, run number) the ledger showed as running right after. */
export interface Kill {
  atMs: number;
  progress: number;
  running: { route: string; key: string; runs: number }[];
}

/** What one exec route's file and ledger say. */
export interface ExecRouteReport {
  businessKeys: number;
  killsMidEffect: number;
  /** How many business keys ran their effect once, twice, ... */
  runsHistogram: Record<string, number>;
  /** Σ(runs - 1) over the ledger. */
  ledgerRepeats: number;
  /** Σ(lines - 1) over the effect's own file. */
  fileRepeats: number;
  /** Ledger runs cut off (by a kill, or the timeout) before the command wrote its line. */
  runsCutBeforeWrite: number;
  /** Runs the receiver itself failed (timeout), each retried. */
  failedRuns: number;
  repeatedKeys: { key: string; runs: number; lines: number }[];
}

export interface CrashReport {
  sent: number;
  uniqueDeliveries: number;
  requests: number;
  networkErrors: number;
  answers: Record<string, number>;
  acknowledged: number;
  stored: number;
  lost: number;
  byStatus: Record<string, number>;
  done: number;
  kills: number;
  /** Per exec route: runs, repeats and what cut them. */
  routes: Record<ExecRoute, ExecRouteReport>;
  /** Two units of one lane seen running at once (by the effects' own locks). */
  overlaps: number;
  /** Business keys whose module effect (transactional) applied exactly once, in one run. */
  moduleAppliedOnce: number;
  /** The hostile module's business keys, those applied exactly once, and its first attempts that failed with what the module did. */
  hostileKeys: number;
  hostileAppliedOnce: number;
  hostileFailures: Record<string, number>;
  /** Deliveries answered 503 (ingest waited past busyTimeoutMs): a module must never cause one. */
  refused: number;
  integrity: string;
  serveExitCode: number | null;
  /** When the last delivery was acknowledged, when the last event was done, and the total. */
  sentMs: number;
  drainedMs: number;
  tookMs: number;
  violations: string[];
}

// Takes the lane's lock (flock on a file: a process killed with its serve lets it go),
// appends, then takes `$3` seconds: a kill during the sleep is a run that happened and is
// repeated; a kill between the ledger's "running" and the printf is a run that never wrote.
// A lock already held is a lane running two units at once: said in the overlaps file ($2).
const EFFECT = `exec 9>>"$1.lock"
flock -n 9 || printf 'OVERLAP %s %s\\n' "$4" "$RECEIVER_KEY" >> "$2"
flock 9
printf '%s %s %s\\n' "$RECEIVER_KEY" "$RECEIVER_EVENT_ID" "$RECEIVER_ATTEMPT" >> "$1"; sleep "$3"`;
// A module effect writes in the transaction that marks it done: a kill rolls both back,
// so it applies exactly once per business key, with no repeat at all.
const MODULE = `export default async function (event, ctx) {
  await ctx.db.run('INSERT INTO applied (business_key, n) VALUES (?, 1) ON CONFLICT (business_key) DO UPDATE SET n = n + 1', [ctx.key]);
}
`;
/** What the hostile module does on its first attempt, by the order's number, and the error its attempt is recorded with. */
const HOSTILE: { name: string; error: RegExp }[] = [
  { name: 'timer-throw', error: /^the module threw outside its handler: hostile timer$/ },
  { name: 'unhandled', error: /left a promise rejection unhandled: hostile rejection$/ },
  { name: 'exit', error: /^the module ended its process \(exit code 7\)$/ },
  { name: 'busy', error: /^module timed out after 1s; its writes were rolled back$/ },
  { name: 'getter', error: /^a thrown \[object Error\] that cannot be described/ },
  { name: 'error-event', error: /^the module threw outside its handler: hostile error event$/ },
];
const HOSTILE_MODULE = `import { EventEmitter } from 'node:events';
const wait = (ms) => new Promise((r) => setTimeout(r, ms));
export default async function (event, ctx) {
  if (ctx.attempt === 1) {
    switch (${JSON.stringify(HOSTILE.map((h) => h.name))}[Math.floor(event.json.n / 20) % ${HOSTILE.length}]) {
      case 'timer-throw': setTimeout(() => { throw new Error('hostile timer'); }, 5); await wait(300); break;
      case 'unhandled': Promise.reject(new Error('hostile rejection')); await wait(300); break;
      case 'exit': process.exit(7);
      case 'busy': for (;;) {}
      case 'getter': { const e = new Error('x'); Object.defineProperty(e, 'message', { get() { throw new Error('no'); } }); throw e; }
      case 'error-event': { const e = new EventEmitter(); setTimeout(() => e.emit('error', new Error('hostile error event')), 5); await wait(300); break; }
    }
  }
  await ctx.db.run('INSERT INTO hostile_applied (business_key, n) VALUES (?, 1) ON CONFLICT (business_key) DO UPDATE SET n = n + 1', [ctx.key]);
}
`;

/** The event type of an order: one in ten runs the slow deploy, one in twenty the hostile module. */
function orderType(order: number): string {
  if (order % 10 === 1) return 'order.shipped';
  if (order % 20 === 6) return 'order.disputed';
  return 'order.paid';
}

export async function crashLoop(o: CrashLoopOptions): Promise<CrashReport> {
  const started = Date.now();
  const runsFile = (route: ExecRoute) => join(o.dir, `${route}-runs.txt`);
  const overlapsFile = join(o.dir, 'overlaps.txt');
  for (const route of EXEC_ROUTES) writeFileSync(runsFile(route), '');
  writeFileSync(overlapsFile, '');
  writeFileSync(join(o.dir, 'record.mjs'), MODULE);
  writeFileSync(join(o.dir, 'hostile.mjs'), HOSTILE_MODULE);
  const exec = (route: ExecRoute, seconds: number) => ({
    exec: ['/bin/sh', '-c', EFFECT, 'effect', runsFile(route), overlapsFile, String(seconds), route],
    timeoutSeconds: 1 + seconds,
  });
  const configFile = writeConfig(o.dir, {
    sources: { shop: shopSource },
    routes: [
      { name: 'fulfil', source: 'shop', events: ['order.*'], key: '{body.order}', effect: exec('fulfil', 0.02) },
      { name: 'deploy', source: 'shop', events: ['order.shipped'], key: '{body.order}', effect: exec('deploy', 0.2) },
      { name: 'record', source: 'shop', events: ['order.*'], key: '{body.order}', effect: { module: './record.mjs', timeoutSeconds: 1 } },
      { name: 'hostile', source: 'shop', events: ['order.disputed'], key: '{body.order}', effect: { module: './hostile.mjs', timeoutSeconds: 1 } },
    ],
    // A short lease and effect timeout: a killed process's claim is taken back within seconds.
    drain: { leaseSeconds: 2, pollMs: 100 },
    retry: { maxAttempts: 1000, baseSeconds: 0.2, maxSeconds: 1 },
    shutdownGraceSeconds: 5,
  });
  const dbPath = join(o.dir, 'receiver.db');

  // The plan: `unique` distinct deliveries; the rest re-send an earlier one, byte for byte.
  // Two deliveries share each business key (order), so the ledger also skips done keys.
  const unique = Math.max(1, Math.round(o.deliveries * (1 - o.duplicateShare)));
  const bodies: { deliveryId: string; body: string; order: string; type: string }[] = [];
  const sends: number[] = [];
  for (let s = 0; s < o.deliveries; s++) {
    const newOne = bodies.length < unique && (bodies.length === 0 || o.random() < (unique - bodies.length) / (o.deliveries - s));
    if (newOne) {
      const i = bodies.length;
      const n = Math.floor(i / 2);
      const order = `o${n}`;
      const deliveryId = `d${i}`;
      bodies.push({ deliveryId, order, type: orderType(n), body: JSON.stringify({ id: deliveryId, type: orderType(n), order, n }) });
      sends.push(i);
    } else {
      sends.push(Math.floor(o.random() * bodies.length));
    }
  }

  const serve = new RestartableServe(configFile, SECRET_ENV);
  await serve.start();
  const db = inspect(dbPath);
  db.exec('CREATE TABLE applied (business_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
  db.exec('CREATE TABLE hostile_applied (business_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
  const tally: SendTally = newTally();
  const violations: string[] = [];
  let ackedSends = 0;
  const countDone = db.prepare(`SELECT count(*) AS n FROM events WHERE status = 'done'`);
  const runningEffects = db.prepare(`SELECT route, business_key AS key, runs FROM effects WHERE status = 'running' AND route IN ('fulfil', 'deploy')`);

  // Kills at random points of the whole job: sending plus draining, measured as
  // acknowledged sends + done events (so some land while ingest is busy, most mid-drain).
  const work = sends.length + unique;
  const thresholds = Array.from({ length: o.kills }, () => Math.floor((0.03 + 0.94 * o.random()) * work)).sort((a, b) => a - b);
  const kills: Kill[] = [];
  const progress = () => ackedSends + (countDone.get() as { n: number }).n;

  // A trail in the run's directory: what happened last, even if this process dies.
  const trace = (line: string) => appendFileSync(join(o.dir, 'trace.log'), `${new Date().toISOString()} ${line}\n`);
  trace(`start: ${o.kills} kills over ${o.deliveries} deliveries`);
  const killer = (async () => {
    for (const threshold of thresholds) {
      while (progress() < threshold && Date.now() < o.deadline) await sleep(10);
      if (Date.now() >= o.deadline) break;
      await sleep(o.random() * 40);
      trace(`kill ${kills.length + 1} at progress ${progress()}`);
      await serve.kill();
      // At most one effect per lane can have been running at the kill.
      const running = runningEffects.all() as { route: string; key: string; runs: number }[];
      kills.push({ atMs: Date.now() - started, progress: progress(), running });
      trace(`killed; running ${JSON.stringify(running)}; restarting`);
      const s = await serve.start();
      trace(`restarted as pid ${s.child.pid}`);
    }
  })();

  let next = 0;
  const sender = async () => {
    while (next < sends.length && Date.now() < o.deadline) {
      const b = bodies[sends[next++] as number]!;
      if (await deliverUntilAcked(() => serve.current(), '/webhooks/shop', b, tally, o.deadline)) ackedSends += 1;
    }
  };
  // A restart that fails, or a serve that exits on its own, fails the run at once (the
  // senders' wait for a server rejects too); so does a minute without progress.
  let sentMs = 0;
  const load = Promise.all([killer, Promise.all(Array.from({ length: o.senders }, sender)).then(() => (sentMs = Date.now() - started))]);
  await watched(load, serve, progress, o.deadline, () => readFileSync(join(o.dir, 'trace.log'), 'utf8')).catch(async (e: unknown) => {
    // No server left behind by a failed run.
    await serve.kill();
    db.close();
    throw e;
  });
  if (kills.length < o.kills) violations.push(`only ${kills.length} of ${o.kills} kills happened before the deadline`);

  // Let the last server drain everything (bounded, and watched), then stop it cleanly.
  const unfinished = db.prepare(`SELECT count(*) AS n FROM events WHERE status <> 'done'`);
  const drained = (async () => {
    while ((unfinished.get() as { n: number }).n > 0 && Date.now() < o.deadline) await sleep(50);
  })();
  await watched(drained, serve, progress, o.deadline, () => readFileSync(join(o.dir, 'trace.log'), 'utf8')).catch(async (e: unknown) => {
    await serve.kill();
    db.close();
    throw e;
  });
  const drainedMs = Date.now() - started;
  const serveExitCode = await serve.stop();

  // --- what the database and the effect's own file say ---
  const stored = new Map(
    (db.prepare(`SELECT delivery_id AS d, id FROM events WHERE source = 'shop'`).all() as { d: string; id: number }[]).map((r) => [r.d, r.id]),
  );
  const byStatus = Object.fromEntries(
    (db.prepare(`SELECT status, count(*) AS n FROM events GROUP BY status`).all() as { status: string; n: number }[]).map((r) => [r.status, r.n]),
  );
  let lost = 0;
  for (const [deliveryId, eventId] of tally.acked) {
    const id = stored.get(deliveryId);
    if (id === undefined) lost += 1;
    else if (id !== eventId) violations.push(`delivery ${deliveryId} was acknowledged as event ${eventId} but is stored as ${id}`);
  }
  if (lost > 0) violations.push(`${lost} acknowledged deliveries are not stored`);
  if (tally.acked.size !== unique) violations.push(`${unique - tally.acked.size} of ${unique} deliveries were never acknowledged`);
  if (stored.size !== unique) violations.push(`${stored.size} events stored for ${unique} distinct deliveries`);
  for (const u of tally.unexpected) violations.push(`unexpected answer ${u.status} for ${u.deliveryId}: ${u.text}`);
  const done = byStatus.done ?? 0;
  if (done !== stored.size) violations.push(`${stored.size - done} events are not done: ${JSON.stringify(byStatus)}`);

  const ledgerOf = db.prepare(`SELECT effect_key AS effectKey, business_key AS key, status, runs FROM effects WHERE route = ?`);
  const runAttemptsOf = db.prepare(
    `SELECT a.event_id AS eventId, a.attempt, e.business_key AS key, a.outcome, a.error FROM attempts a JOIN effects e ON e.effect_key = a.effect_key WHERE e.route = ? AND a.outcome IN ('ok', 'failed', 'running')`,
  );
  const moduleLedger = (route: string, table: string) =>
    db
      .prepare(`SELECT f.business_key AS key, f.status, f.runs, a.n FROM effects f LEFT JOIN ${table} a ON a.business_key = f.business_key WHERE f.route = ?`)
      .all(route) as { key: string; status: string; runs: number; n: number | null }[];
  const expectedKeys = (types: readonly string[] | undefined) =>
    new Set(bodies.filter((b) => types === undefined || types.includes(b.type)).map((b) => b.order));
  const routes = {} as Record<ExecRoute, ExecRouteReport>;
  for (const route of EXEC_ROUTES) {
    routes[route] = checkExecRoute({
      route,
      ledger: ledgerOf.all(route) as LedgerRow[],
      runAttempts: runAttemptsOf.all(route) as RunAttempt[],
      file: readFileSync(runsFile(route), 'utf8'),
      expectedKeys: expectedKeys(route === 'deploy' ? ['order.shipped'] : undefined),
      kills,
      violations,
    });
  }
  const overlaps = readFileSync(overlapsFile, 'utf8')
    .split('\n')
    .filter((l) => l !== '');
  for (const line of overlaps.slice(0, 10)) violations.push(`a lane ran two units at once: ${line}`);

  const records = moduleLedger('record', 'applied');
  let moduleApplied = 0;
  for (const m of records) {
    if (m.status !== 'done' || m.runs !== 1 || m.n !== 1)
      violations.push(`module effect record:${m.key} is ${m.status} after ${m.runs} runs, applied ${m.n ?? 0} times`);
    else moduleApplied += 1;
  }
  const appliedRows = (db.prepare(`SELECT count(*) AS c FROM applied`).get() as { c: number }).c;
  const orders = expectedKeys(undefined).size;
  if (records.length !== orders || appliedRows !== orders)
    violations.push(`${records.length} module effects and ${appliedRows} applied rows for ${orders} business keys`);

  // The hostile module: applied exactly once per key, after a first attempt that failed
  // with what it did (or that a kill cut), however it misbehaved.
  const hostile = moduleLedger('hostile', 'hostile_applied');
  const hostileExpected = expectedKeys(['order.disputed']);
  let hostileApplied = 0;
  for (const m of hostile) {
    if (m.status !== 'done' || m.n !== 1) violations.push(`hostile module effect ${m.key} is ${m.status}, applied ${m.n ?? 0} times`);
    else hostileApplied += 1;
    hostileExpected.delete(m.key);
  }
  for (const key of hostileExpected) violations.push(`hostile business key ${key} has no effect in the ledger`);
  const hostileFailures: Record<string, number> = {};
  const firstAttempts = db
    .prepare(
      `SELECT e.body, a.outcome, a.error FROM attempts a JOIN events e ON e.id = a.event_id WHERE a.route = 'hostile' AND a.attempt = 1 AND a.outcome <> 'skipped'`,
    )
    .all() as { body: Buffer; outcome: string; error: string | null }[];
  for (const a of firstAttempts) {
    const h = HOSTILE[Math.floor((JSON.parse(a.body.toString()) as { n: number }).n / 20) % HOSTILE.length]!;
    if (a.outcome === 'failed' && a.error?.startsWith('interrupted: ')) hostileFailures.interrupted = (hostileFailures.interrupted ?? 0) + 1;
    else if (a.outcome !== 'failed' || !h.error.test(a.error ?? ''))
      violations.push(`hostile ${h.name}: first attempt ${a.outcome} with ${JSON.stringify(a.error)}`);
    else hostileFailures[h.name] = (hostileFailures[h.name] ?? 0) + 1;
  }
  const refused = tally.byStatus.get(503) ?? 0;
  if (refused > 0) violations.push(`${refused} deliveries were answered 503: ingest waited on the drain past busyTimeoutMs`);
  const integrity = integrityCheck(db);
  db.close();
  if (integrity !== 'ok') violations.push(`integrity_check: ${integrity}`);

  if (serveExitCode !== 0) violations.push(`the last serve exited with ${serveExitCode} on SIGTERM`);

  return {
    sent: sends.length,
    uniqueDeliveries: unique,
    requests: tally.requests,
    networkErrors: tally.networkErrors,
    answers: Object.fromEntries(tally.byStatus),
    acknowledged: tally.acked.size,
    stored: stored.size,
    lost,
    byStatus,
    done,
    kills: kills.length,
    routes,
    overlaps: overlaps.length,
    moduleAppliedOnce: moduleApplied,
    hostileKeys: hostile.length,
    hostileAppliedOnce: hostileApplied,
    hostileFailures,
    refused,
    integrity,
    serveExitCode,
    sentMs,
    drainedMs,
    tookMs: Date.now() - started,
    violations,
  };
}

/**
 * Awaits `work`, failing at once if the server failed (a restart failed, or it exited on its
 * own), or if `progress` stands still for a minute: a stuck run reports, it does not hang.
 */
async function watched(work: Promise<unknown>, serve: RestartableServe, progress: () => number, deadline: number, trail: () => string): Promise<void> {
  let finished = false;
  const watchdog = (async () => {
    let last = -1;
    let since = Date.now();
    while (!finished && Date.now() < deadline) {
      if (serve.failure !== undefined) throw serve.failure;
      const now = progress();
      if (now !== last) [last, since] = [now, Date.now()];
      else if (Date.now() - since > 60_000)
        throw new Error(`no progress for 60 s (at ${now}); last lines of the trace:\n${trail().split('\n').slice(-10).join('\n')}`);
      await sleep(250);
    }
  })();
  await Promise.all([work.finally(() => (finished = true)), watchdog]);
}

interface LedgerRow {
  effectKey: string;
  key: string;
  status: string;
  runs: number;
}
interface RunAttempt {
  eventId: number;
  attempt: number;
  key: string;
  outcome: 'ok' | 'failed' | 'running';
  error: string | null;
}

/**
 * One exec route's file against its ledger: every business key done exactly once (one ok
 * run); every line in the file a run the ledger recorded beforehand; every extra run either
 * a run a kill interrupted (seen running right after that kill) or a failure; the file's
 * repeats the ledger's, less the runs a kill cut before the command wrote.
 */
function checkExecRoute(c: {
  route: ExecRoute;
  ledger: LedgerRow[];
  runAttempts: RunAttempt[];
  file: string;
  expectedKeys: Set<string>;
  kills: Kill[];
  violations: string[];
}): ExecRouteReport {
  const { route, ledger, runAttempts, kills, violations } = c;
  // Lines of the effect's file: "<key> <event id> <attempt>".
  const lines = new Map<string, number>();
  const linesPerKey = new Map<string, number>();
  for (const line of c.file.split('\n')) {
    if (line === '') continue;
    lines.set(line, (lines.get(line) ?? 0) + 1);
    const key = line.split(' ')[0] as string;
    linesPerKey.set(key, (linesPerKey.get(key) ?? 0) + 1);
  }
  const ledgerRuns = new Set(runAttempts.map((a) => `${a.key} ${a.eventId} ${a.attempt}`));
  for (const [line, n] of lines) {
    if (!ledgerRuns.has(line)) violations.push(`${route} ran as "${line}" with no ledger record of that run`);
    if (n > 1) violations.push(`the ${route} run "${line}" wrote ${n} times`);
  }
  let runsCutBeforeWrite = 0;
  let failedRuns = 0;
  const okPerKey = new Map<string, number>();
  for (const a of runAttempts) {
    const wrote = lines.has(`${a.key} ${a.eventId} ${a.attempt}`);
    if (a.outcome === 'ok') {
      okPerKey.set(a.key, (okPerKey.get(a.key) ?? 0) + 1);
      if (!wrote) violations.push(`the ledger says ${route} ${a.key} ran ok for event ${a.eventId} attempt ${a.attempt}, but the command never wrote`);
    } else {
      if (a.outcome === 'failed' && !isInterrupted(a)) failedRuns += 1;
      if (!wrote) runsCutBeforeWrite += 1;
    }
  }
  const interrupted = new Set(kills.flatMap((k) => k.running.filter((r) => r.route === route).map((r) => `${r.key}#${r.runs}`)));
  const interruptedRows = runAttempts.filter(isInterrupted).length;
  const runsHistogram: Record<string, number> = {};
  const repeatedKeys: ExecRouteReport['repeatedKeys'] = [];
  let ledgerRepeats = 0;
  let fileRepeats = 0;
  const expected = new Set(c.expectedKeys);
  for (const row of ledger) {
    runsHistogram[row.runs] = (runsHistogram[row.runs] ?? 0) + 1;
    ledgerRepeats += row.runs - 1;
    const n = linesPerKey.get(row.key) ?? 0;
    fileRepeats += Math.max(0, n - 1);
    if (row.runs > 1) repeatedKeys.push({ key: row.key, runs: row.runs, lines: n });
    if (row.status !== 'done') violations.push(`effect ${row.effectKey} is ${row.status}, not done`);
    if (okPerKey.get(row.key) !== 1) violations.push(`effect ${row.effectKey} has ${okPerKey.get(row.key) ?? 0} ok runs`);
    if (n > row.runs) violations.push(`effect ${row.effectKey} ran ${n} times by its file but ${row.runs} by the ledger`);
    if (!expected.delete(row.key)) violations.push(`unexpected business key ${row.key} in the ${route} ledger`);
  }
  for (const key of expected) violations.push(`business key ${key} has no ${route} effect in the ledger`);
  if (ledgerRepeats !== interrupted.size + failedRuns) {
    violations.push(`${route}: the ledger shows ${ledgerRepeats} repeats; kills interrupted ${interrupted.size} runs and ${failedRuns} runs failed`);
  }
  if (interruptedRows !== interrupted.size)
    violations.push(
      `${route}: ${interruptedRows} attempts were interrupted (left running, or ended so when taken back); ${interrupted.size} runs were seen running at a kill`,
    );
  // One lane: at most one of its runs can be cut by each kill.
  if (interrupted.size > kills.length) violations.push(`${route}: ${interrupted.size} runs interrupted by ${kills.length} kills`);
  for (const r of interrupted) {
    const [key, runs] = r.split('#');
    const row = ledger.find((l) => l.key === key);
    if (row === undefined || row.runs <= Number(runs)) violations.push(`the ${route} run of ${key} interrupted at run ${runs} was not repeated`);
  }
  if (fileRepeats !== ledgerRepeats - runsCutBeforeWrite) {
    violations.push(`${route}: the file shows ${fileRepeats} repeats, the ledger ${ledgerRepeats} less ${runsCutBeforeWrite} cut before writing`);
  }
  return {
    businessKeys: ledger.length,
    killsMidEffect: interrupted.size,
    runsHistogram,
    ledgerRepeats,
    fileRepeats,
    runsCutBeforeWrite,
    failedRuns,
    repeatedKeys: repeatedKeys.slice(0, 20),
  };
}

/** A run a kill cut: left `running`, or ended as interrupted when its unit was taken back. */
function isInterrupted(a: { outcome: string; error: string | null }): boolean {
  return a.outcome === 'running' || (a.outcome === 'failed' && a.error !== null && a.error.startsWith('interrupted: '));
}

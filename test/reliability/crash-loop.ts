/**
 * Crash loop: signed deliveries (a share of them re-sent duplicates) go to a real
 * `receiver serve` child while it is killed with SIGKILL at random moments and restarted.
 * Each event's route runs an exec effect that appends "<business key> <event id> <attempt>"
 * to a file, so the file is an independent record of every run that actually happened,
 * to be compared with the effect ledger.
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

/** One kill: when, and which effect runs (key, run number) the ledger showed as running right after. */
export interface Kill {
  atMs: number;
  progress: number;
  running: { key: string; runs: number }[];
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
  killsMidEffect: number;
  businessKeys: number;
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
  /** Business keys whose module effect (transactional) applied exactly once, in one run. */
  moduleAppliedOnce: number;
  integrity: string;
  serveExitCode: number | null;
  /** When the last delivery was acknowledged, when the last event was done, and the total. */
  sentMs: number;
  drainedMs: number;
  tookMs: number;
  violations: string[];
}

// Appends first, then takes ~20 ms: a kill during the sleep is a run that happened and is
// repeated; a kill between the ledger's "running" and the printf is a run that never wrote.
const EFFECT = `printf '%s %s %s\\n' "$RECEIVER_KEY" "$RECEIVER_EVENT_ID" "$RECEIVER_ATTEMPT" >> "$1"; sleep 0.02`;
// A module effect writes in the transaction that marks it done: a kill rolls both back,
// so it applies exactly once per business key, with no repeat at all.
const MODULE = `export default async function (event, ctx) {
  await ctx.db.run('INSERT INTO applied (business_key, n) VALUES (?, 1) ON CONFLICT (business_key) DO UPDATE SET n = n + 1', [ctx.key]);
}
`;

export async function crashLoop(o: CrashLoopOptions): Promise<CrashReport> {
  const started = Date.now();
  const runsFile = join(o.dir, 'effect-runs.txt');
  writeFileSync(runsFile, '');
  writeFileSync(join(o.dir, 'record.mjs'), MODULE);
  const configFile = writeConfig(o.dir, {
    sources: { shop: shopSource },
    routes: [
      {
        name: 'fulfil',
        source: 'shop',
        events: ['order.*'],
        key: '{body.order}',
        effect: { exec: ['/bin/sh', '-c', EFFECT, 'effect', runsFile], timeoutSeconds: 1 },
      },
      { name: 'record', source: 'shop', events: ['order.*'], key: '{body.order}', effect: { module: './record.mjs', timeoutSeconds: 1 } },
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
  const bodies: { deliveryId: string; body: string; order: string }[] = [];
  const sends: number[] = [];
  for (let s = 0; s < o.deliveries; s++) {
    const newOne = bodies.length < unique && (bodies.length === 0 || o.random() < (unique - bodies.length) / (o.deliveries - s));
    if (newOne) {
      const i = bodies.length;
      const order = `o${Math.floor(i / 2)}`;
      const deliveryId = `d${i}`;
      bodies.push({ deliveryId, order, body: JSON.stringify({ id: deliveryId, type: 'order.paid', order, n: i }) });
      sends.push(i);
    } else {
      sends.push(Math.floor(o.random() * bodies.length));
    }
  }

  const serve = new RestartableServe(configFile, SECRET_ENV);
  await serve.start();
  const db = inspect(dbPath);
  db.exec('CREATE TABLE applied (business_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
  const tally: SendTally = newTally();
  const violations: string[] = [];
  let ackedSends = 0;
  const countDone = db.prepare(`SELECT count(*) AS n FROM events WHERE status = 'done'`);
  const runningEffects = db.prepare(`SELECT effect_key AS key, runs FROM effects WHERE status = 'running' AND route = 'fulfil'`);

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
      // The drain is serial: at most one effect can have been running at the kill.
      const running = runningEffects.all() as { key: string; runs: number }[];
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

  const ledger = db.prepare(`SELECT effect_key AS effectKey, business_key AS key, status, runs FROM effects WHERE route = 'fulfil'`).all() as {
    effectKey: string;
    key: string;
    status: string;
    runs: number;
  }[];
  const runAttempts = db
    .prepare(
      `SELECT a.event_id AS eventId, a.attempt, e.business_key AS key, a.outcome, a.error FROM attempts a JOIN effects e ON e.effect_key = a.effect_key WHERE e.route = 'fulfil' AND a.outcome IN ('ok', 'failed', 'running')`,
    )
    .all() as { eventId: number; attempt: number; key: string; outcome: 'ok' | 'failed' | 'running'; error: string | null }[];
  const moduleLedger = db
    .prepare(
      `SELECT f.business_key AS key, f.status, f.runs, a.n FROM effects f LEFT JOIN applied a ON a.business_key = f.business_key WHERE f.route = 'record'`,
    )
    .all() as { key: string; status: string; runs: number; n: number | null }[];
  const appliedRows = (db.prepare(`SELECT count(*) AS c FROM applied`).get() as { c: number }).c;
  const integrity = integrityCheck(db);
  db.close();
  if (integrity !== 'ok') violations.push(`integrity_check: ${integrity}`);

  // Lines of the effect's file: "<key> <event id> <attempt>".
  const lines = new Map<string, number>();
  const linesPerKey = new Map<string, number>();
  for (const line of readFileSync(runsFile, 'utf8').split('\n')) {
    if (line === '') continue;
    lines.set(line, (lines.get(line) ?? 0) + 1);
    const key = line.split(' ')[0] as string;
    linesPerKey.set(key, (linesPerKey.get(key) ?? 0) + 1);
  }
  const ledgerRuns = new Set(runAttempts.map((a) => `${a.key} ${a.eventId} ${a.attempt}`));
  // Every run the command made is a run the ledger recorded beforehand, and each ran once.
  for (const [line, n] of lines) {
    if (!ledgerRuns.has(line)) violations.push(`the effect ran as "${line}" with no ledger record of that run`);
    if (n > 1) violations.push(`the run "${line}" wrote ${n} times`);
  }
  let runsCutBeforeWrite = 0;
  let failedRuns = 0;
  const okPerKey = new Map<string, number>();
  for (const a of runAttempts) {
    const wrote = lines.has(`${a.key} ${a.eventId} ${a.attempt}`);
    if (a.outcome === 'ok') {
      okPerKey.set(a.key, (okPerKey.get(a.key) ?? 0) + 1);
      if (!wrote) violations.push(`the ledger says ${a.key} ran ok for event ${a.eventId} attempt ${a.attempt}, but the command never wrote`);
    } else {
      if (a.outcome === 'failed' && !isInterrupted(a)) failedRuns += 1;
      if (!wrote) runsCutBeforeWrite += 1;
    }
  }

  // The ledger: every business key done exactly once (one ok run); every extra run is
  // either a run a kill interrupted (seen as "running" right after that kill) or a failure.
  const interrupted = new Set(kills.flatMap((k) => k.running.map((r) => `${r.key}#${r.runs}`)));
  const interruptedRows = runAttempts.filter(isInterrupted).length;
  const expectedKeys = new Set(bodies.map((b) => b.order));
  const runsHistogram: Record<string, number> = {};
  const repeatedKeys: CrashReport['repeatedKeys'] = [];
  let ledgerRepeats = 0;
  let fileRepeats = 0;
  for (const row of ledger) {
    runsHistogram[row.runs] = (runsHistogram[row.runs] ?? 0) + 1;
    ledgerRepeats += row.runs - 1;
    const n = linesPerKey.get(row.key) ?? 0;
    fileRepeats += Math.max(0, n - 1);
    if (row.runs > 1) repeatedKeys.push({ key: row.key, runs: row.runs, lines: n });
    if (row.status !== 'done') violations.push(`effect ${row.effectKey} is ${row.status}, not done`);
    if (okPerKey.get(row.key) !== 1) violations.push(`effect ${row.effectKey} has ${okPerKey.get(row.key) ?? 0} ok runs`);
    if (n > row.runs) violations.push(`effect ${row.effectKey} ran ${n} times by its file but ${row.runs} by the ledger`);
    if (!expectedKeys.delete(row.key)) violations.push(`unexpected business key ${row.key} in the ledger`);
  }
  for (const key of expectedKeys) violations.push(`business key ${key} has no effect in the ledger`);
  let moduleApplied = 0;
  for (const m of moduleLedger) {
    if (m.status !== 'done' || m.runs !== 1 || m.n !== 1)
      violations.push(`module effect record:${m.key} is ${m.status} after ${m.runs} runs, applied ${m.n ?? 0} times`);
    else moduleApplied += 1;
  }
  if (moduleLedger.length !== ledger.length || appliedRows !== moduleLedger.length) {
    violations.push(`${moduleLedger.length} module effects and ${appliedRows} applied rows for ${ledger.length} business keys`);
  }
  if (ledgerRepeats !== interrupted.size + failedRuns) {
    violations.push(`the ledger shows ${ledgerRepeats} repeats; kills interrupted ${interrupted.size} runs and ${failedRuns} runs failed`);
  }
  if (interruptedRows !== interrupted.size)
    violations.push(
      `${interruptedRows} attempts were interrupted (left running, or ended so when taken back); ${interrupted.size} runs were seen running at a kill`,
    );
  if (interrupted.size > kills.length) violations.push(`${interrupted.size} runs interrupted by ${kills.length} kills of a serial drain`);
  for (const r of interrupted) {
    const [key, runs] = r.split('#');
    const row = ledger.find((l) => l.effectKey === key);
    if (row === undefined || row.runs <= Number(runs)) violations.push(`the run of ${key} interrupted at run ${runs} was not repeated`);
  }
  // The file's repeats are the ledger's, less the runs a kill cut before the command wrote.
  if (fileRepeats !== ledgerRepeats - runsCutBeforeWrite) {
    violations.push(`the file shows ${fileRepeats} repeats, the ledger ${ledgerRepeats} less ${runsCutBeforeWrite} cut before writing`);
  }
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
    killsMidEffect: interrupted.size,
    businessKeys: ledger.length,
    runsHistogram,
    ledgerRepeats,
    fileRepeats,
    runsCutBeforeWrite,
    failedRuns,
    repeatedKeys,
    moduleAppliedOnce: moduleApplied,
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

/** A run a kill cut: left `running`, or ended as interrupted when its unit was taken back. */
function isInterrupted(a: { outcome: string; error: string | null }): boolean {
  return a.outcome === 'running' || (a.outcome === 'failed' && a.error !== null && a.error.startsWith('interrupted: '));
}

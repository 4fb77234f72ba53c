/**
 * Power-cut loop: the real `receiver serve` keeps its database on a FUSE file system
 * (powerfs.py) that holds back every write not yet fsynced and every directory entry not
 * yet made durable by an fsync of its directory. A cut SIGKILLs serve and every receiver
 * command beside it, unmounts, and keeps only what a disk would keep after losing power
 * (optionally the last unsynced write torn at a sector boundary). kill -9 alone keeps the
 * page cache, so only this shows whether the receiver's own fsyncs are the right ones.
 *
 * Each cut is followed by checks on what survived, then serve restarts on it. Effects run
 * meanwhile: exec and http (the outside world: their records live outside the cut file
 * system) and a module writing in the receiver's own transaction; purge, replay and backup
 * run beside serve, and some restarts are preceded by another command that opens the
 * database and, as the last connection, checkpoints and removes its WAL.
 */
import Database from 'better-sqlite3';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync, appendFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { receiverCommand, writeConfig } from '../helpers.js';
import { deliverUntilAcked, integrityCheck, newTally, RestartableServe, SECRET_ENV, shopSource, type SendTally } from './harness.js';

const PYTHON = '/usr/bin/python3';
const POWERFS = new URL('./powerfs.py', import.meta.url).pathname;

/** Why the power-cut harness cannot run here, or undefined when it can. */
export function powerCutUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'FUSE power cuts need Linux';
  if (!existsSync('/dev/fuse')) return 'no /dev/fuse on this machine';
  if (process.getuid?.() !== 0) return 'mounting a FUSE file system with allow_other needs root';
  const py = spawnSync(PYTHON, ['-c', 'import fusepy'], { encoding: 'utf8' });
  if (py.status !== 0) return `${PYTHON} cannot import fusepy (apt-get install python3-fusepy fuse3)`;
  if (spawnSync('fusermount', ['-V']).status !== 0) return 'no fusermount (apt-get install fuse3)';
  return undefined;
}

export interface PowerCutOptions {
  /** A scratch directory on a real disk: config, effect records, the file system's states. */
  dir: string;
  cuts: number;
  senders: number;
  random: () => number;
  /** Every loop stops here; what is unfinished is reported as a violation. */
  deadline: number;
  /** Business keys acknowledged but not yet through the http effect, at most (senders wait). */
  backlog: number;
  /** Tear the last unsynced write at a sector boundary at some cuts. */
  tear: boolean;
}

export interface PowerCutReport {
  cuts: number;
  /** Cuts made while senders were sending; cuts made as an http effect reached the app with no sender active. */
  cutsDuringIngest: number;
  cutsAtEffect: number;
  /** Cuts whose last unsynced write landed in part. */
  tornWrites: number;
  /** Restarts preceded by another command that was the last to close the database. */
  restartsAfterOtherCommand: number;
  sent: number;
  acknowledged: number;
  /** Acknowledged deliveries missing after a cut (summed over cuts) or at the end. */
  lost: number;
  integrityFailures: number;
  /** Effect runs (exec, http) found `running` in what survived a cut. */
  cutsMidEffect: number;
  /** Σ(runs - 1) over the exec and http effects' ledger rows. */
  repeats: number;
  /** Runs the receiver recorded as failed (each retried). */
  failedRuns: number;
  /** Runs seen by the exec effect's file and by the http app, beyond one per business key. */
  execRepeats: number;
  httpRepeats: number;
  businessKeys: number;
  moduleAppliedOnce: number;
  commands: { purge: number; replay: number; backup: number; killed: number; failed: number };
  backupsVerified: number;
  tookMs: number;
  violations: string[];
}

// The exec effect: a record outside the cut file system, then a short wait (a cut may land in it).
const EXEC = `printf '%s %s %s\\n' "$RECEIVER_KEY" "$RECEIVER_EVENT_ID" "$RECEIVER_ATTEMPT" >> "$1"; sleep 0.02`;
// The module effect writes in the transaction that records it: applied exactly once per key.
const MODULE = `export default async function (event, ctx) {
  await ctx.db.run('CREATE TABLE IF NOT EXISTS applied (business_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
  await ctx.db.run('INSERT INTO applied (business_key, n) VALUES (?, 1) ON CONFLICT (business_key) DO UPDATE SET n = n + 1', [ctx.key]);
}
`;

/** The http effect's app, in this process: it records every request and can cut the power as one arrives. */
class App {
  readonly lines: string[] = [];
  #server: Server;
  #trigger: (() => void) | undefined;
  url = '';

  constructor() {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { order: string };
        this.lines.push(`${body.order} ${String(req.headers['x-receiver-event-id'])} ${String(req.headers['x-receiver-attempt'])}`);
        const trigger = this.#trigger;
        if (trigger !== undefined) {
          // The effect acted; serve never hears the answer.
          this.#trigger = undefined;
          trigger();
          return;
        }
        setTimeout(() => res.writeHead(200).end('ok'), 5);
      });
    });
  }

  async listen(): Promise<void> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    const a = this.#server.address();
    this.url = `http://127.0.0.1:${typeof a === 'object' && a !== null ? a.port : 0}/effect`;
  }

  /** Resolves when the next request arrives (the caller then cuts), or after `ms`. */
  nextRequest(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#trigger = undefined;
        resolve(false);
      }, ms);
      this.#trigger = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  /** Business keys whose http effect ran: the drain's progress. */
  seenKeys(): number {
    return new Set(this.lines.map((l) => l.split(' ')[0])).size;
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((r) => this.#server.close(() => r()));
  }
}

/** A mounted powerfs: unmount() is the power cut and resolves to the surviving state's directory. */
export class PowerFs {
  #child: ChildProcess;
  #out: string;
  #log = '';

  constructor(
    readonly backing: string,
    readonly mount: string,
    out: string,
    seed: number,
    tear: boolean,
    clean: boolean,
  ) {
    this.#out = out;
    this.#child = spawn(
      PYTHON,
      [POWERFS, '--backing', backing, '--mount', mount, '--out', out, '--seed', String(seed), ...(tear ? ['--tear'] : []), ...(clean ? ['--clean'] : [])],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    this.#child.stdout!.on('data', (d: Buffer) => (this.#log += d.toString()));
    this.#child.stderr!.on('data', (d: Buffer) => (this.#log += d.toString()));
  }

  async mounted(): Promise<void> {
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      if (readFileSync('/proc/mounts', 'utf8').includes(` ${this.mount} fuse`)) return;
      if (this.#child.exitCode !== null) throw new Error(`powerfs exited: ${this.#log}`);
      await sleep(10);
    }
    throw new Error(`powerfs did not mount ${this.mount}: ${this.#log}`);
  }

  /** Unmounts (every process using it must be gone) and waits for the durable state to be written. */
  async unmount(): Promise<{ out: string; torn: boolean; log: string }> {
    const exited = new Promise<void>((r) => (this.#child.exitCode !== null ? r() : this.#child.once('exit', () => r())));
    for (let i = 0; ; i++) {
      const r = spawnSync('fusermount', ['-u', this.mount], { encoding: 'utf8' });
      if (r.status === 0) break;
      if (i === 10) killHolders(this.mount);
      if (i > 200) throw new Error(`cannot unmount ${this.mount}: ${r.stderr}`);
      await sleep(25);
    }
    await exited;
    if (this.#child.exitCode !== 0) throw new Error(`powerfs failed: ${this.#log}`);
    return { out: this.#out, torn: /torn \(/.test(this.#log), log: this.#log.trim() };
  }

  /** After a failed run: no mount left behind. */
  abandon(): void {
    spawnSync('fusermount', ['-u', '-z', this.mount]);
    this.#child.kill('SIGKILL');
  }
}

/** Processes still holding a file below `mount` (a receiver's child left by SIGKILL): killed too. */
function killHolders(mount: string): void {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const links = [readlinkSync(`/proc/${pid}/cwd`), ...readdirSync(`/proc/${pid}/fd`).map((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`))];
      if (links.some((l) => l.startsWith(`${mount}/`) || l === mount)) process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
}

/** A receiver command beside serve, killable at the cut. */
interface Command {
  child: ChildProcess;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
}

function command(args: string[]): Command {
  const run = receiverCommand(args, { env: SECRET_ENV });
  const child = spawn(run.file, run.args, { cwd: run.cwd, env: run.env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal, stderr })),
  );
  return { child, done };
}

export async function powerCutLoop(o: PowerCutOptions): Promise<PowerCutReport> {
  const started = Date.now();
  const mnt = join(o.dir, 'mnt');
  mkdirSync(mnt);
  mkdirSync(join(o.dir, 'state-0'));
  const execFile = join(o.dir, 'exec-runs.txt');
  writeFileSync(execFile, '');
  writeFileSync(join(o.dir, 'record.mjs'), MODULE);
  const app = new App();
  await app.listen();
  const dbPath = join(mnt, 'receiver.db');
  const configFile = writeConfig(o.dir, {
    database: dbPath,
    sources: { shop: shopSource },
    routes: [
      {
        name: 'fulfil',
        source: 'shop',
        events: ['order.*'],
        key: '{body.order}',
        effect: { exec: ['/bin/sh', '-c', EXEC, 'effect', execFile], timeoutSeconds: 5 },
      },
      { name: 'notify', source: 'shop', events: ['order.*'], key: '{body.order}', effect: { http: { url: app.url }, timeoutSeconds: 5 } },
      { name: 'record', source: 'shop', events: ['order.*'], key: '{body.order}', effect: { module: './record.mjs', timeoutSeconds: 5 } },
    ],
    drain: { leaseSeconds: 2, pollMs: 50 },
    retry: { maxAttempts: 1000, baseSeconds: 0.2, maxSeconds: 1 },
    shutdownGraceSeconds: 5,
  });
  const trace = (line: string) => appendFileSync(join(o.dir, 'trace.log'), `${new Date().toISOString()} ${line}\n`);
  const violations: string[] = [];
  const report: PowerCutReport = {
    cuts: 0,
    cutsDuringIngest: 0,
    cutsAtEffect: 0,
    tornWrites: 0,
    restartsAfterOtherCommand: 0,
    sent: 0,
    acknowledged: 0,
    lost: 0,
    integrityFailures: 0,
    cutsMidEffect: 0,
    repeats: 0,
    failedRuns: 0,
    execRepeats: 0,
    httpRepeats: 0,
    businessKeys: 0,
    moduleAppliedOnce: 0,
    commands: { purge: 0, replay: 0, backup: 0, killed: 0, failed: 0 },
    backupsVerified: 0,
    tookMs: 0,
    violations,
  };

  // Deliveries: new ones, two per business key, and one in ten re-sending an earlier one.
  const bodies: { deliveryId: string; body: string; order: string }[] = [];
  const nextDelivery = () => {
    if (bodies.length > 0 && o.random() < 0.1) return bodies[Math.floor(o.random() * bodies.length)]!;
    const i = bodies.length;
    const b = {
      deliveryId: `d${i}`,
      order: `o${Math.floor(i / 2)}`,
      body: JSON.stringify({ id: `d${i}`, type: 'order.paid', order: `o${Math.floor(i / 2)}`, n: i }),
    };
    bodies.push(b);
    return b;
  };
  const tally: SendTally = newTally();
  const serve = new RestartableServe(configFile, SECRET_ENV);

  // Senders pass through a gate the loop closes to let the drain run alone; they hold back
  // while the drain is far behind (the http app's count of events is its progress).
  let open = true;
  let sending = true;
  let inFlight = 0;
  const ackedKeys = new Set<string>();
  const sender = async () => {
    while (sending && Date.now() < o.deadline) {
      if (!open || ackedKeys.size - app.seenKeys() > o.backlog) {
        await sleep(10);
        continue;
      }
      const d = nextDelivery();
      report.sent += 1;
      inFlight += 1;
      try {
        if (await deliverUntilAcked(() => serve.current(), '/webhooks/shop', d, tally, o.deadline)) ackedKeys.add(d.order);
      } finally {
        inFlight -= 1;
      }
    }
  };

  // Receiver commands beside serve while it runs; their results are checked after the cut.
  const running = new Set<Command>();
  const backups: { file: string; verified: boolean }[] = [];
  let backupSeq = 0;
  let ops = false;
  const opsLoop = async () => {
    for (let first = true; ops; first = false) {
      if (!first) await sleep(150 + o.random() * 350);
      if (!ops) break;
      const r = o.random();
      let cmd: Command;
      let onOk = () => {};
      if (r < 0.3) {
        cmd = command(['purge', '-c', configFile, '--days', '30']);
        onOk = () => (report.commands.purge += 1);
      } else if (r < 0.6) {
        const ids = [...tally.acked.values()];
        if (ids.length === 0) continue;
        cmd = command(['replay', '-c', configFile, String(ids[Math.floor(o.random() * ids.length)])]);
        onOk = () => (report.commands.replay += 1);
      } else {
        const name = `backup-${++backupSeq}.db`;
        cmd = command(['backup', '-c', configFile, join(mnt, name)]);
        onOk = () => {
          report.commands.backup += 1;
          backups.push({ file: name, verified: false });
        };
      }
      running.add(cmd);
      void cmd.done.then((res) => {
        running.delete(cmd);
        if (res.signal === 'SIGKILL') report.commands.killed += 1;
        else if (res.code === 0) onOk();
        // replay refuses an event that is not done or dead yet: exit 1 with a reason.
        else if (!(args(cmd)[0] === 'replay' && res.code === 1)) {
          report.commands.failed += 1;
          violations.push(`${args(cmd).join(' ')} exited ${res.code}: ${res.stderr.slice(0, 300)}`);
        }
      });
    }
  };
  const args = (cmd: Command) => cmd.child.spawnargs.slice(cmd.child.spawnargs.findIndex((a) => a.endsWith('receiver.js')) + 1);

  const interrupted = new Set<string>();
  let fs: PowerFs | undefined;
  let state = join(o.dir, 'state-0');
  const senders = Array.from({ length: o.senders }, sender);
  try {
    for (let round = 0; round <= o.cuts && Date.now() < o.deadline; round++) {
      const last = round === o.cuts;
      fs = new PowerFs(state, mnt, join(o.dir, `state-${round + 1}`), Math.floor(o.random() * 2 ** 31), o.tear && o.random() < 0.5, last);
      await fs.mounted();
      trace(`round ${round}: mounted`);
      // Another command first: it recovers the database and, as the last connection, removes its WAL.
      if (round > 0 && o.random() < 0.3) {
        const res = await command(['purge', '-c', configFile, '--days', '30']).done;
        if (res.code !== 0) violations.push(`purge before restart ${round} exited ${res.code}: ${res.stderr.slice(0, 300)}`);
        report.restartsAfterOtherCommand += 1;
        trace(`round ${round}: purge before restart done`);
      }
      const keysAtStart = app.seenKeys();
      const s = await serve.start();
      trace(`round ${round}: serve pid ${s.child.pid}`);
      open = true;
      ops = true;
      const opsDone = opsLoop();

      if (last) {
        // Let every delivery be sent, acknowledged and drained, then stop cleanly.
        sending = false;
        await Promise.all(senders);
        ops = false;
        await opsDone;
        await Promise.all([...running].map((c) => c.done));
        trace(`round ${round}: sent; draining`);
        await waitDrained(dbPath, o.deadline);
        trace(`round ${round}: drained; stopping`);
        const code = await serve.stop();
        if (code !== 0) violations.push(`the last serve exited ${code} on SIGTERM`);
      } else {
        // The cut lands once this round has acknowledged a few deliveries (the first ones
        // land in a WAL serve may just have created, where a missing directory fsync shows).
        // Each round lets the drain finish one more business key first (or run dry): a cut
        // that always lands before an effect's result would repeat that effect forever.
        const progressBy = Math.min(o.deadline, Date.now() + 20_000);
        while (app.seenKeys() <= keysAtStart && app.seenKeys() < ackedKeys.size && Date.now() < progressBy) await sleep(10);
        const target = tally.acked.size + 1 + Math.floor(o.random() * 4);
        const ackBy = Math.min(o.deadline, Date.now() + 3000);
        while (tally.acked.size < target && Date.now() < ackBy) await sleep(5);
        const atEffect = o.random() < 0.5;
        if (atEffect) {
          // Commands beside serve finish first (a backup that reported success is checked after the cut).
          ops = false;
          const until = Date.now() + 15_000;
          while (running.size > 0 && Date.now() < until) await sleep(10);
          open = false;
          while (inFlight > 0 && Date.now() < o.deadline) await sleep(5);
          // No ingest commit to share an fdatasync with: only the drain's own sync keeps the running mark.
          if (await app.nextRequest(5000)) report.cutsAtEffect += 1;
        } else {
          await sleep(o.random() * 30);
          report.cutsDuringIngest += 1;
        }
        trace(`round ${round}: cutting (at effect ${atEffect}, acked ${tally.acked.size}, app ${app.lines.length})`);
        ops = false;
        // The cut: serve and every command beside it at once, then the disk keeps what was synced.
        for (const c of running) c.child.kill('SIGKILL');
        await serve.kill();
        await Promise.all([...running].map((c) => c.done));
        await opsDone;
      }
      writeFileSync(join(o.dir, `serve-${round}.log`), serve.logs.at(-1) ?? '');
      const cut = await fs.unmount();
      fs = undefined;
      if (!last) report.cuts += 1;
      if (cut.torn) report.tornWrites += 1;
      trace(`round ${round}: ${last ? 'stopped' : 'cut'}; ${cut.log}`);
      rmSync(state, { recursive: true, force: true });
      state = cut.out;
      checkSurvivors(state, o.dir, round, tally, backups, interrupted, report, violations);
    }
  } finally {
    sending = false;
    ops = false;
    for (const c of running) c.child.kill('SIGKILL');
    await serve.kill();
    fs?.abandon();
    await app.close();
  }
  await Promise.all(senders);

  finalChecks(state, o.dir, execFile, app, tally, interrupted, report, violations);
  report.acknowledged = tally.acked.size;
  for (const u of tally.unexpected) violations.push(`unexpected answer ${u.status} for ${u.deliveryId}: ${u.text}`);
  report.tookMs = Date.now() - started;
  return report;
}

/** Waits until no event is left to drain (a short-lived connection: serve keeps the WAL). */
async function waitDrained(dbPath: string, deadline: number): Promise<void> {
  while (Date.now() < deadline) {
    const db = new Database(dbPath, { fileMustExist: true, timeout: 5000 });
    const n = (db.prepare(`SELECT count(*) AS n FROM events WHERE status <> 'done'`).get() as { n: number }).n;
    db.close();
    if (n === 0) return;
    await sleep(100);
  }
}

/** A copy of what survived, opened outside the cut file system (its recovery changes nothing there). */
function openCopy(state: string, dir: string, round: number): { db: Database.Database; copy: string } {
  const copy = join(dir, `check-${round}`);
  rmSync(copy, { recursive: true, force: true });
  cpSync(state, copy, { recursive: true });
  return { db: new Database(join(copy, 'receiver.db'), { fileMustExist: true }), copy };
}

function checkSurvivors(
  state: string,
  dir: string,
  round: number,
  tally: SendTally,
  backups: { file: string; verified: boolean }[],
  interrupted: Set<string>,
  report: PowerCutReport,
  violations: string[],
): void {
  if (!existsSync(join(state, 'receiver.db'))) {
    if (tally.acked.size > 0) {
      violations.push(`cut ${round + 1}: the database file did not survive (${tally.acked.size} deliveries acknowledged)`);
      report.lost += tally.acked.size;
    }
    return;
  }
  const { db, copy } = openCopy(state, dir, round);
  try {
    const integrity = integrityCheck(db);
    if (integrity !== 'ok') {
      report.integrityFailures += 1;
      violations.push(`cut ${round + 1}: integrity_check: ${integrity.slice(0, 300)}`);
    }
    const stored = new Set((db.prepare(`SELECT delivery_id AS d FROM events WHERE source = 'shop'`).all() as { d: string }[]).map((r) => r.d));
    const lost = [...tally.acked.keys()].filter((d) => !stored.has(d));
    if (lost.length > 0) {
      report.lost += lost.length;
      violations.push(`cut ${round + 1}: ${lost.length} acknowledged deliveries lost (${lost.slice(0, 5).join(', ')})`);
    }
    // An external effect whose running mark survived without its result may run again.
    for (const r of db.prepare(`SELECT effect_key AS key, runs FROM effects WHERE status = 'running' AND route IN ('fulfil', 'notify')`).all() as {
      key: string;
      runs: number;
    }[]) {
      if (!interrupted.has(`${r.key}#${r.runs}`)) report.cutsMidEffect += 1;
      interrupted.add(`${r.key}#${r.runs}`);
    }
  } finally {
    db.close();
    rmSync(copy, { recursive: true, force: true });
  }
  // Every backup that reported success is on disk, whole; then it is moved away (as an operator would).
  for (const b of backups.filter((x) => !x.verified)) {
    b.verified = true;
    const file = join(state, b.file);
    if (!existsSync(file)) {
      violations.push(`cut ${round + 1}: backup ${b.file} reported success but did not survive`);
      continue;
    }
    const copy = join(dir, `restore-${b.file}`);
    cpSync(file, copy);
    try {
      const bdb = new Database(copy, { fileMustExist: true });
      const integrity = integrityCheck(bdb);
      bdb.close();
      if (integrity !== 'ok') violations.push(`cut ${round + 1}: backup ${b.file} fails integrity_check: ${integrity.slice(0, 300)}`);
      else report.backupsVerified += 1;
    } catch (e) {
      violations.push(`cut ${round + 1}: backup ${b.file} cannot be opened: ${(e as Error).message}`);
    }
    rmSync(copy, { force: true });
    rmSync(file, { force: true });
  }
  for (const f of readdirSync(state).filter((n) => n.startsWith('backup-') || n.startsWith('.backup-'))) rmSync(join(state, f), { force: true });
}

function finalChecks(
  state: string,
  dir: string,
  execFile: string,
  app: App,
  tally: SendTally,
  interrupted: Set<string>,
  report: PowerCutReport,
  violations: string[],
): void {
  const { db, copy } = openCopy(state, dir, -1);
  try {
    const stored = new Map(
      (db.prepare(`SELECT delivery_id AS d, id, status FROM events WHERE source = 'shop'`).all() as { d: string; id: number; status: string }[]).map((r) => [
        r.d,
        r,
      ]),
    );
    for (const [d, id] of tally.acked) {
      const row = stored.get(d);
      if (row === undefined) {
        report.lost += 1;
        violations.push(`delivery ${d} acknowledged as event ${id} is not stored at the end`);
      } else if (row.id !== id) violations.push(`delivery ${d} was acknowledged as event ${id} but is stored as ${row.id}`);
      else if (row.status !== 'done') violations.push(`event ${id} is ${row.status} at the end, not done`);
    }
    if (stored.size !== tally.acked.size) violations.push(`${stored.size} events stored for ${tally.acked.size} acknowledged deliveries`);

    const attempts = db
      .prepare(
        `SELECT f.route, f.business_key AS key, a.event_id AS eventId, a.attempt, a.outcome, a.error FROM attempts a JOIN effects f ON f.effect_key = a.effect_key WHERE f.route IN ('fulfil', 'notify') AND a.outcome IN ('ok', 'failed', 'running')`,
      )
      .all() as { route: string; key: string; eventId: number; attempt: number; outcome: string; error: string | null }[];
    const ledger = db
      .prepare(`SELECT route, effect_key AS effectKey, business_key AS key, status, runs FROM effects WHERE route IN ('fulfil', 'notify')`)
      .all() as {
      route: string;
      effectKey: string;
      key: string;
      status: string;
      runs: number;
    }[];
    const records: Record<string, string[]> = {
      fulfil: readFileSync(execFile, 'utf8')
        .split('\n')
        .filter((l) => l !== ''),
      notify: app.lines,
    };
    for (const route of ['fulfil', 'notify'] as const) {
      const lines = records[route]!;
      const recorded = new Set(attempts.filter((a) => a.route === route).map((a) => `${a.key} ${a.eventId} ${a.attempt}`));
      const perLine = new Map<string, number>();
      const perKey = new Map<string, number>();
      for (const l of lines) {
        perLine.set(l, (perLine.get(l) ?? 0) + 1);
        const key = l.split(' ')[0]!;
        perKey.set(key, (perKey.get(key) ?? 0) + 1);
      }
      // Each run that acted was recorded in the ledger before it acted (and acted once).
      for (const [l, n] of perLine) {
        if (!recorded.has(l)) violations.push(`${route} ran as "${l}" with no durable ledger record of that run`);
        if (n > 1) violations.push(`${route}'s run "${l}" acted ${n} times`);
      }
      let extra = 0;
      for (const row of ledger.filter((r) => r.route === route)) {
        const n = perKey.get(row.key) ?? 0;
        extra += Math.max(0, n - 1);
        if (row.status !== 'done') violations.push(`effect ${row.effectKey} is ${row.status} at the end`);
        if (n > row.runs) violations.push(`effect ${row.effectKey} acted ${n} times, the ledger counts ${row.runs} runs`);
        if (n === 0) violations.push(`effect ${row.effectKey} is ${row.status} but never acted`);
        const ok = attempts.filter((a) => a.route === route && a.key === row.key && a.outcome === 'ok').length;
        if (ok !== 1) violations.push(`effect ${row.effectKey} has ${ok} ok runs`);
      }
      if (route === 'fulfil') report.execRepeats = extra;
      else report.httpRepeats = extra;
    }
    report.businessKeys = ledger.filter((r) => r.route === 'fulfil').length;
    report.repeats = ledger.reduce((s, r) => s + r.runs - 1, 0);
    // A run a cut interrupted ended as failed with an "interrupted: " error when its unit was taken back: counted with the cuts, not as a failure.
    report.failedRuns = attempts.filter((a) => a.outcome === 'failed' && !(a.error ?? '').startsWith('interrupted: ')).length;
    // A repeat only where a cut fell between a running mark and its result (or a failed run).
    if (report.repeats !== interrupted.size + report.failedRuns) {
      violations.push(`the ledger shows ${report.repeats} repeats; cuts fell mid-effect ${interrupted.size} times and ${report.failedRuns} runs failed`);
    }
    const hasApplied = db.prepare(`SELECT 1 FROM sqlite_master WHERE name = 'applied'`).get() !== undefined;
    if (!hasApplied) db.exec('CREATE TABLE applied (business_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
    const modules = db
      .prepare(
        `SELECT f.business_key AS key, f.status, f.runs, a.n FROM effects f LEFT JOIN applied a ON a.business_key = f.business_key WHERE f.route = 'record'`,
      )
      .all() as { key: string; status: string; runs: number; n: number | null }[];
    for (const m of modules) {
      if (m.status === 'done' && m.runs === 1 && m.n === 1) report.moduleAppliedOnce += 1;
      else violations.push(`module effect record:${m.key} is ${m.status} after ${m.runs} runs, applied ${m.n ?? 0} times`);
    }
    if (modules.length !== report.businessKeys) violations.push(`${modules.length} module effects for ${report.businessKeys} business keys`);
    const integrity = integrityCheck(db);
    if (integrity !== 'ok') {
      report.integrityFailures += 1;
      violations.push(`at the end: integrity_check: ${integrity.slice(0, 300)}`);
    }
  } finally {
    db.close();
    rmSync(copy, { recursive: true, force: true });
  }
}

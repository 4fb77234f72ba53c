import type { Command } from 'commander';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Config } from '../config/load.js';
import { ReceiverError } from '../errors.js';
import type { Store } from '../store/types.js';
import { addCommonOptions, configFrom, openStoreFor, positiveInt, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

/**
 * Rows per purge batch (one short write transaction each): long enough that a million
 * events purge in minutes, short enough that a running server's inserts wait for the write
 * lock no longer than a batch. Chosen with bench/purge.mjs (figures: bench/README.md).
 */
const DEFAULT_BATCH_SIZE = 1000;
/** Between batches the write lock is free at least this long, and at least as long as the batch held it. */
const MIN_PAUSE_MS = 20;

const DAY_MS = 86_400_000;

/**
 * The shortest --ledger-days: a purged ledger key runs its effect again when an event brings
 * it, so it must outlive every redelivery a sender may still make, with room to spare for
 * a late manual "resend" from a dashboard: twice the longest retry horizon, and never less
 * than 30 days.
 */
const LEDGER_FLOOR_DAYS = 30;

/** Progress on a terminal: the first line after this long, then at most this often. */
const PROGRESS_AFTER_MS = 1000;
const PROGRESS_EVERY_MS = 250;

/** Printed after a run that purged (or, dry, would purge) events. */
const PURGE_COST =
  'A purged delivery id is forgotten: if its sender delivers it again, it is accepted as a new event. ' +
  'Its effects are still skipped while their keys are in the effect ledger (replay --force re-runs them).';

/** Printed after a run that purged (or, dry, would purge) ledger entries. */
const LEDGER_PURGE_COST =
  'A purged effect key is forgotten: the next event that brings it (a redelivery of a purged event, ' +
  'or a new event with the same business key) runs its effect again.';

interface PurgeOptions extends CommonOptions {
  days?: number;
  bodiesDays?: number;
  ledgerDays?: number;
  dryRun?: boolean;
  batchSize?: number;
  force?: boolean;
  json?: boolean;
}

export function registerPurge(program: Command, io: CliIo): void {
  addCommonOptions(program.command('purge'))
    .description(
      'delete finished (done) events older than N days in short batches, safe while `serve` runs; keeps pending, processing and dead events; ' +
        'with --ledger-days, also old effect ledger entries no stored event refers to',
    )
    .option('--days <n>', 'delete done events received more than N days ago', positiveInt('--days'))
    .option(
      '--bodies-days <n>',
      'tiered retention: drop body and headers of done events older than N days, keeping their rows and keys',
      positiveInt('--bodies-days'),
    )
    .option(
      '--ledger-days <n>',
      `delete effect ledger entries finished more than N days ago that no stored event refers to (N at least ${LEDGER_FLOOR_DAYS}, or twice the longest retry horizon)`,
      positiveInt('--ledger-days'),
    )
    .option('--dry-run', 'count what would be removed; change nothing')
    .option('--batch-size <n>', `rows per write transaction (default ${DEFAULT_BATCH_SIZE})`, positiveInt('--batch-size'))
    .option('--force', 'purge even when --days is shorter than the longest retry horizon of the configured sources')
    .option('--json', 'print one JSON document')
    .addHelpText('after', `\n${PURGE_COST}\n${LEDGER_PURGE_COST}\n`)
    .action((options: PurgeOptions) => purge(options, io));
}

/** The configured source whose sender may retry longest. */
function longestHorizon(config: Config): { source: string; hours: number } | undefined {
  let best: { source: string; hours: number } | undefined;
  for (const s of config.sources.values()) {
    if (best === undefined || s.retryHorizonHours > best.hours) best = { source: s.name, hours: s.retryHorizonHours };
  }
  return best;
}

/** The shortest --ledger-days the configured sources allow, and why. */
function ledgerFloor(config: Config): { days: number; horizon: { source: string; hours: number } | undefined } {
  const horizon = longestHorizon(config);
  const days = Math.max(LEDGER_FLOOR_DAYS, horizon === undefined ? 0 : Math.ceil((2 * horizon.hours) / 24));
  return { days, horizon };
}

function checkOptions(options: PurgeOptions, config: Config): void {
  if (options.days === undefined && options.bodiesDays === undefined && options.ledgerDays === undefined) {
    throw new ReceiverError(
      'usage',
      'purge needs --days N (delete done events older than N days), --bodies-days N (drop their bodies only) or --ledger-days N (forget old effect keys)',
      { hint: 'receiver purge --days 30' },
    );
  }
  if (options.ledgerDays !== undefined) {
    // No --force here: a ledger key forgotten too soon runs an effect twice.
    const floor = ledgerFloor(config);
    if (options.ledgerDays < floor.days) {
      const why =
        floor.horizon !== undefined && floor.days > LEDGER_FLOOR_DAYS
          ? `twice the longest retry horizon of the configured sources (${floor.horizon.hours} hours, source "${floor.horizon.source}")`
          : `the floor of ${LEDGER_FLOOR_DAYS} days`;
      throw new ReceiverError(
        'usage',
        `--ledger-days ${options.ledgerDays} is shorter than ${why}. ` +
          'An effect key forgotten sooner runs its effect again when a late redelivery or a resend brings it.',
        { hint: `use --ledger-days ${floor.days} or more (--force does not lower this floor)` },
      );
    }
  }
  if (options.days !== undefined && options.bodiesDays !== undefined && options.bodiesDays > options.days) {
    throw new ReceiverError('usage', `--bodies-days ${options.bodiesDays} is longer than --days ${options.days}: events older than --days are deleted whole`, {
      hint: `use a --bodies-days shorter than --days, e.g. --days ${options.days} --bodies-days ${Math.max(1, Math.floor(options.days / 4))}`,
    });
  }
  const horizon = longestHorizon(config);
  // A key purged inside a sender's retry horizon turns a late redelivery into a new event.
  if (options.days !== undefined && horizon !== undefined && options.days * 24 < horizon.hours && options.force !== true) {
    throw new ReceiverError(
      'usage',
      `--days ${options.days} (${options.days * 24} hours) is shorter than the longest retry horizon of the configured sources: ${horizon.hours} hours (source "${horizon.source}"). ` +
        'A delivery id purged sooner can still be redelivered, and would then be accepted as a new event.',
      { hint: `use --days ${Math.ceil(horizon.hours / 24)} or more, or add --force to purge anyway` },
    );
  }
}

interface BatchTimes {
  batches: number;
  ms: number[];
}

/** What a batch said: whether more is left, and whether it wrote (took the write lock); `idle`: it found nothing to do, and is not counted. */
interface BatchDone {
  more: boolean;
  wrote: boolean;
  idle?: boolean;
}

/**
 * Calls `batch` until it says nothing is left, pausing after each that wrote so others get
 * the write lock; `after` runs after each call (the progress line).
 */
async function inBatches(times: BatchTimes, batch: () => Promise<BatchDone>, after: () => void): Promise<void> {
  for (;;) {
    const started = performance.now();
    const { more, wrote, idle } = await batch();
    if (idle === true) return;
    const elapsed = performance.now() - started;
    times.batches += 1;
    times.ms.push(elapsed);
    after();
    if (!more) return;
    // Let a running server's ingest (and drain) take the lock between batches.
    if (wrote) await sleep(Math.max(MIN_PAUSE_MS, elapsed));
  }
}

const round = (ms: number) => Math.round(ms * 10) / 10;

function median(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface PurgeReport {
  purged: number;
  attemptsPurged: number;
  conflictsPurged: number;
  bodiesDropped: number;
  /** Effect ledger entries deleted (or, dry, purgeable now). */
  ledgerPurged: number;
  /** Body keys past their retry horizon deleted (or, dry, expired now); every run removes them. */
  bodyKeysPurged: number;
  dryRun: boolean;
  /** Done events received before this instant were purged (null without --days). */
  purgedBefore: string | null;
  /** Done events received before this instant lost their body and headers (null without --bodies-days). */
  bodiesDroppedBefore: string | null;
  /** Ledger entries finished before this instant, that no stored event refers to, were purged (null without --ledger-days). */
  ledgerPurgedBefore: string | null;
  batchSize: number;
  batches: number;
  batchMs: { median: number; max: number };
}

const count = (n: number) => n.toLocaleString('en-US');

/**
 * On a terminal, a line on stderr rewritten in place with what was removed so far: only
 * for a run that has taken more than a second, at most four times a second. Nothing
 * anywhere else (a pipe, cron, a log).
 */
function progressLine(io: CliIo, report: PurgeReport) {
  if (io.stderr.isTTY !== true) return { update() {}, end() {} };
  const started = io.now();
  let drawnAt: number | undefined;
  return {
    update() {
      const now = io.now();
      if (now - started < PROGRESS_AFTER_MS || (drawnAt !== undefined && now - drawnAt < PROGRESS_EVERY_MS)) return;
      drawnAt = now;
      const parts = [`${count(report.purged)} event(s)`];
      if (report.bodiesDropped > 0) parts.push(`${count(report.bodiesDropped)} bodies dropped`);
      if (report.ledgerPurged > 0) parts.push(`${count(report.ledgerPurged)} ledger entries`);
      io.stderr.write(`\r\x1b[Kpurged ${parts.join(', ')}…`);
    },
    end() {
      if (drawnAt !== undefined) io.stderr.write('\r\x1b[K');
    },
  };
}

async function runPurge(store: Store, options: PurgeOptions, io: CliIo): Promise<PurgeReport> {
  const now = io.now();
  const size = options.batchSize ?? DEFAULT_BATCH_SIZE;
  const purgeCutoff = options.days === undefined ? undefined : now - options.days * DAY_MS;
  const bodiesCutoff = options.bodiesDays === undefined ? undefined : now - options.bodiesDays * DAY_MS;
  const ledgerCutoff = options.ledgerDays === undefined ? undefined : now - options.ledgerDays * DAY_MS;
  const report: PurgeReport = {
    purged: 0,
    attemptsPurged: 0,
    conflictsPurged: 0,
    bodiesDropped: 0,
    ledgerPurged: 0,
    bodyKeysPurged: 0,
    dryRun: options.dryRun === true,
    purgedBefore: purgeCutoff === undefined ? null : new Date(purgeCutoff).toISOString(),
    bodiesDroppedBefore: bodiesCutoff === undefined ? null : new Date(bodiesCutoff).toISOString(),
    ledgerPurgedBefore: ledgerCutoff === undefined ? null : new Date(ledgerCutoff).toISOString(),
    batchSize: size,
    batches: 0,
    batchMs: { median: 0, max: 0 },
  };
  if (options.dryRun === true) {
    if (purgeCutoff !== undefined) report.purged = await store.countPurgeable(purgeCutoff);
    if (bodiesCutoff !== undefined) {
      // Events that --days deletes anyway are not counted twice.
      const older = purgeCutoff === undefined ? 0 : await store.countBodiesDroppable(Math.min(purgeCutoff, bodiesCutoff));
      report.bodiesDropped = (await store.countBodiesDroppable(bodiesCutoff)) - older;
    }
    // Keys still referred to by events that --days would delete are not counted.
    if (ledgerCutoff !== undefined) report.ledgerPurged = await store.countLedgerPurgeable(ledgerCutoff);
    report.bodyKeysPurged = await store.countExpiredBodyKeys(now);
    return report;
  }
  const times: BatchTimes = { batches: 0, ms: [] };
  const progress = progressLine(io, report);
  try {
    // Events first: fewer rows are left to strip, and the keys only they referred to can go too.
    if (purgeCutoff !== undefined) {
      await inBatches(
        times,
        async () => {
          const r = await store.purgeBatch(purgeCutoff, size);
          report.purged += r.events;
          report.attemptsPurged += r.attempts;
          report.conflictsPurged += r.conflicts;
          return { more: r.events === size, wrote: true };
        },
        progress.update,
      );
    }
    if (bodiesCutoff !== undefined) {
      await inBatches(
        times,
        async () => {
          const r = await store.dropBodiesBatch(bodiesCutoff, size);
          report.bodiesDropped += r.events;
          return { more: r.events === size, wrote: true };
        },
        progress.update,
      );
    }
    if (ledgerCutoff !== undefined) {
      let afterKey = '';
      await inBatches(
        times,
        async () => {
          const r = await store.purgeLedgerBatch(ledgerCutoff, afterKey, size);
          report.ledgerPurged += r.removed;
          // A stretch of the ledger with nothing to delete took no write lock: no pause.
          const wrote = r.picked > 0;
          if (r.lastKey === null) return { more: false, wrote };
          afterKey = r.lastKey;
          return { more: true, wrote };
        },
        progress.update,
      );
    }
    // Body keys whose retry horizon is over protect nothing any more, whatever the options.
    await inBatches(
      times,
      async () => {
        const removed = await store.purgeBodyKeysBatch(now, size);
        report.bodyKeysPurged += removed;
        return { more: removed === size, wrote: removed > 0, idle: removed === 0 && report.bodyKeysPurged === 0 };
      },
      progress.update,
    );
  } finally {
    progress.end();
  }
  report.batches = times.batches;
  report.batchMs = { median: round(median(times.ms)), max: round(Math.max(0, ...times.ms)) };
  return report;
}

function describe(report: PurgeReport, options: PurgeOptions): string {
  const lines: string[] = [];
  const verb = report.dryRun ? 'Would purge' : 'Purged';
  if (options.days !== undefined) {
    lines.push(
      `${verb} ${report.purged} done event(s) older than ${options.days} day(s) (received before ${report.purgedBefore})` +
        (report.dryRun ? '.' : `, with ${report.attemptsPurged} attempt(s) and ${report.conflictsPurged} conflict(s).`),
    );
  }
  if (options.bodiesDays !== undefined) {
    lines.push(
      `${report.dryRun ? 'Would drop' : 'Dropped'} body and headers of ${report.bodiesDropped} done event(s) older than ${options.bodiesDays} day(s) (received before ${report.bodiesDroppedBefore}); ` +
        'their rows and delivery ids stay, so redeliveries are still recognised, but they can no longer be replayed.',
    );
  }
  if (options.ledgerDays !== undefined) {
    lines.push(
      `${verb} ${report.ledgerPurged} effect ledger entr${report.ledgerPurged === 1 ? 'y' : 'ies'} finished more than ${options.ledgerDays} day(s) ago ` +
        `(before ${report.ledgerPurgedBefore}) that no stored event refers to` +
        (report.dryRun && options.days !== undefined ? ' (not counting those only the events above refer to).' : '.'),
    );
  }
  if (report.bodyKeysPurged > 0)
    lines.push(`${verb} ${report.bodyKeysPurged} body key(s) past their retry horizon (a body sent again under a new delivery id is a new event after it).`);
  if (report.dryRun) lines.push('Dry run: nothing was changed.');
  else
    lines.push(`${report.batches} batch(es) of up to ${report.batchSize} rows; batch time median ${report.batchMs.median} ms, max ${report.batchMs.max} ms.`);
  // Each cost is said when it was paid (or, dry, would be): not after a run that forgot nothing.
  if (report.purged > 0) lines.push(`Note: ${PURGE_COST}`);
  if (report.ledgerPurged > 0) lines.push(`Note: ${LEDGER_PURGE_COST}`);
  return `${lines.join('\n')}\n`;
}

export async function purge(options: PurgeOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env, { secrets: false });
  checkOptions(options, config);
  const store = await openStoreFor(config);
  try {
    const report = await runPurge(store, options, io);
    if (options.json === true) printJson(io.stdout, report);
    else io.stdout.write(describe(report, options));
  } finally {
    await store.close();
  }
}

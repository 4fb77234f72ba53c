import type { Command } from 'commander';
import type { Config } from '../config/load.js';
import type { StoreStats } from '../store/ops-types.js';
import type { CatchUpState } from '../store/catch-up-types.js';
import { addCommonOptions, configFrom, openStoreFor, printable, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

interface StatsOptions extends CommonOptions {
  json?: boolean;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
const hours = (ms: number) => Math.round((ms / HOUR_MS) * 10) / 10;
const days = (ms: number) => Math.round((ms / DAY_MS) * 10) / 10;

/** 1536 -> "1.5 KiB". */
function bytesText(n: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} bytes` : `${v.toFixed(1)} ${units[i]}`;
}

/**
 * When the database's first event is still stored, nothing was ever purged, and the oldest
 * stored event is as old as the database: its received_at. Null once the first was purged.
 */
function databaseSince(s: StoreStats): number | null {
  if (s.firstEventReceivedAt === null) return null;
  return Math.min(s.firstEventReceivedAt, ...s.sources.map((x) => x.oldestReceivedAt));
}

/** The JSON document of `stats --json`. */
export function statsJson(s: StoreStats, config: Config, now: number, catchUp: readonly CatchUpState[] = []) {
  const seen = new Map(s.sources.map((x) => [x.source, x]));
  const names = [...new Set([...config.sources.keys(), ...seen.keys()])].sort();
  const entries = s.effectsByStatus.running + s.effectsByStatus.done + s.effectsByStatus.failed;
  return {
    at: iso(now),
    // The first event this database received, while it is still stored (nothing purged yet).
    firstEventAt: iso(databaseSince(s)),
    events: { ...s.byStatus, total: s.byStatus.pending + s.byStatus.processing + s.byStatus.done + s.byStatus.dead },
    duplicates: s.duplicates,
    conflicts: s.conflicts,
    dead: s.byStatus.dead,
    stuckClaims: { count: s.stuckClaims, oldestLeaseExpiredAt: iso(s.oldestStuckLeaseExpiresAt) },
    // How far back dedupe keys reach per source, against how long its sender retries.
    sources: names.map((name) => {
      const row = seen.get(name);
      const horizon = config.sources.get(name)?.retryHorizonHours ?? null;
      const ageHours = row === undefined ? null : hours(now - row.oldestReceivedAt);
      return {
        source: name,
        configured: config.sources.has(name),
        events: row?.events ?? 0,
        oldestReceivedAt: iso(row?.oldestReceivedAt ?? null),
        oldestKeyAgeHours: ageHours,
        retryHorizonHours: horizon,
        keysCoverHorizon: ageHours === null || horizon === null ? null : ageHours >= horizon,
      };
    }),
    effects: s.effectsByStatus,
    // The effect ledger: one row per effect key, kept until `purge --ledger-days`.
    ledger: {
      entries,
      bytes: s.ledger.bytes,
      bytesPerEntry: entries === 0 ? null : Math.round(s.ledger.bytes / entries),
      oldestFinishedAt: iso(s.ledger.oldestFinishedAt),
      oldestFinishedAgeDays: s.ledger.oldestFinishedAt === null ? null : days(now - s.ledger.oldestFinishedAt),
    },
    // Sources with catchUp configured, and any that ran before: where each stands.
    catchUp: [...new Set([...config.catchUp.keys(), ...catchUp.map((c) => c.source)])].sort().map((name) => {
      const c = catchUp.find((x) => x.source === name);
      return {
        source: name,
        configured: config.catchUp.has(name),
        everyMinutes: config.catchUp.get(name)?.everyMinutes ?? null,
        firstConfiguredAt: iso(c?.configuredAt ?? null),
        resumeAt: iso(c?.resumeAt ?? null),
        // A run stopped at its request budget: the next lists only up to here first.
        olderPartUntil: iso(c?.partial?.until ?? null),
        lastRunAt: iso(c?.lastRunAt ?? null),
        lastOkAt: iso(c?.lastOkAt ?? null),
        lastError: c?.lastError ?? null,
        lastCounts: c?.lastCounts ?? null,
      };
    }),
  };
}

/** Whether a source's stored keys reach back over its horizon, and if not, the plain reason. */
function verdict(s: ReturnType<typeof statsJson>['sources'][number], dbAgeHours: number | null): string {
  if (s.keysCoverHorizon === null) return '';
  if (s.keysCoverHorizon) return ', covered';
  // Nothing was ever purged, and the first event is younger than the horizon: nothing is missing.
  if (dbAgeHours !== null && s.retryHorizonHours !== null && dbAgeHours < s.retryHorizonHours) {
    return `; the database itself is younger than the horizon (its first event arrived ${dbAgeHours} h ago), so no key is missing`;
  }
  return ', younger than the horizon: no older event of this source is stored (a new or quiet source, or events purged with --force)';
}

function describe(j: ReturnType<typeof statsJson>): string {
  const out = [
    `events: ${j.events.total} (pending ${j.events.pending}, processing ${j.events.processing}, done ${j.events.done}, dead ${j.events.dead})`,
    `duplicates: ${j.duplicates}   conflicts: ${j.conflicts}`,
    `effects: done ${j.effects.done}, running ${j.effects.running}, failed ${j.effects.failed}`,
    `ledger: ${j.ledger.entries} effect key(s), ${bytesText(j.ledger.bytes)}` +
      (j.ledger.oldestFinishedAt === null ? '' : `, oldest finished ${j.ledger.oldestFinishedAt} (${j.ledger.oldestFinishedAgeDays} days ago)`),
    j.stuckClaims.count === 0
      ? 'stuck claims: none'
      : `stuck claims: ${j.stuckClaims.count} processing event(s) past their lease (oldest expired ${j.stuckClaims.oldestLeaseExpiredAt}); a running drain takes them back`,
  ];
  if (j.dead > 0) out.push(`dead: ${j.dead} event(s); see \`receiver events list --status dead\`, then \`receiver replay --dead\``);
  out.push('oldest key per source (against its retry horizon):');
  if (j.sources.length === 0) out.push('  (no sources)');
  const dbAgeHours = j.firstEventAt === null ? null : hours(Date.parse(j.at!) - Date.parse(j.firstEventAt));
  for (const s of j.sources) {
    const age = s.oldestKeyAgeHours === null ? 'no events' : `${s.oldestKeyAgeHours} h old (${s.events} event(s))`;
    const horizon = s.retryHorizonHours === null ? 'not configured any more' : `horizon ${s.retryHorizonHours} h`;
    out.push(`  ${s.source}: ${age}, ${horizon}${verdict(s, dbAgeHours)}`);
  }
  if (j.catchUp.length > 0) out.push("catch-up (from the senders' APIs):");
  for (const c of j.catchUp) {
    const last = c.lastRunAt === null ? 'never run' : `last run ${c.lastRunAt}${c.lastError === null ? ' ok' : ` FAILED: ${printable(c.lastError)}`}`;
    const n = c.lastCounts;
    const counts =
      n === null
        ? ''
        : ` (listed ${n.listed}, already stored ${n.alreadyStored}, stored ${n.storedNow}, redelivery asked ${n.redeliveryAsked}, failed ${n.failed})`;
    const every = c.everyMinutes === null ? 'not configured any more' : `every ${c.everyMinutes} min`;
    const older = c.olderPartUntil === null ? '' : `, the older part up to ${c.olderPartUntil} first`;
    out.push(`  ${c.source}: ${every}, ${last}${counts}, resumes from ${c.resumeAt ?? c.firstConfiguredAt ?? 'now'}${older}`);
  }
  return `${out.join('\n')}\n`;
}

export function registerStats(program: Command, io: CliIo): void {
  addCommonOptions(program.command('stats'))
    .description("counts by status, duplicates and conflicts, oldest key age against the retry horizons, stuck claims, the effect ledger's size")
    .option('--json', 'print one JSON document')
    .action((options: StatsOptions) => stats(options, io));
}

/** `receiver stats`: counts by status, duplicates and conflicts, key ages against the retry horizons, catch-up. */
export async function stats(options: StatsOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env, { secrets: false });
  const store = await openStoreFor(config);
  const now = io.now();
  let s: StoreStats;
  let catchUp: CatchUpState[];
  try {
    s = await store.stats(now);
    catchUp = await store.catchUpStates();
  } finally {
    await store.close();
  }
  const json = statsJson(s, config, now, catchUp);
  if (options.json === true) printJson(io.stdout, json);
  else io.stdout.write(describe(json));
}

import type { Command } from 'commander';
import type { Config } from '../config/load.js';
import type { StoreStats } from '../store/ops-types.js';
import type { CatchUpState } from '../store/catch-up-types.js';
import { addCommonOptions, configFrom, openStoreFor, printable, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

const HOUR_MS = 3_600_000;

interface StatsOptions extends CommonOptions {
  json?: boolean;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
const hours = (ms: number) => Math.round((ms / HOUR_MS) * 10) / 10;

/** The JSON document of `stats --json`. */
export function statsJson(s: StoreStats, config: Config, now: number, catchUp: readonly CatchUpState[] = []) {
  const seen = new Map(s.sources.map((x) => [x.source, x]));
  const names = [...new Set([...config.sources.keys(), ...seen.keys()])].sort();
  return {
    at: iso(now),
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

function describe(j: ReturnType<typeof statsJson>): string {
  const out = [
    `events: ${j.events.total} (pending ${j.events.pending}, processing ${j.events.processing}, done ${j.events.done}, dead ${j.events.dead})`,
    `duplicates: ${j.duplicates}   conflicts: ${j.conflicts}`,
    `effects: done ${j.effects.done}, running ${j.effects.running}, failed ${j.effects.failed}`,
    j.stuckClaims.count === 0
      ? 'stuck claims: none'
      : `stuck claims: ${j.stuckClaims.count} processing event(s) past their lease (oldest expired ${j.stuckClaims.oldestLeaseExpiredAt}); a running drain takes them back`,
  ];
  if (j.dead > 0) out.push(`dead: ${j.dead} event(s); see \`receiver events list --status dead\`, then \`receiver replay --dead\``);
  out.push('oldest key per source (against its retry horizon):');
  if (j.sources.length === 0) out.push('  (no sources)');
  for (const s of j.sources) {
    const age = s.oldestKeyAgeHours === null ? 'no events' : `${s.oldestKeyAgeHours} h old (${s.events} event(s))`;
    const horizon = s.retryHorizonHours === null ? 'not configured any more' : `horizon ${s.retryHorizonHours} h`;
    const verdict = s.keysCoverHorizon === null ? '' : s.keysCoverHorizon ? ', covered' : ', younger than the horizon (a young database, or purged too early)';
    out.push(`  ${s.source}: ${age}, ${horizon}${verdict}`);
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
    .description('counts by status, duplicates and conflicts, oldest key age against the retry horizons, stuck claims')
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

import type { Command } from 'commander';
import { hours, statsJson } from '../json/stats.js';
import type { StoreStats } from '../store/ops-types.js';
import type { CatchUpState } from '../store/catch-up-types.js';
import type { AlertRecord } from '../store/alert-types.js';
import { addCommonOptions, configFrom, openStoreFor, printable, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

interface StatsOptions extends CommonOptions {
  json?: boolean;
}

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

/** 75 -> "1 min 15 s": how long a lane's oldest pending unit has waited. */
function ageText(seconds: number): string {
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
  return `${Math.floor(seconds / 86_400)} d ${Math.floor((seconds % 86_400) / 3600)} h`;
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
  out.push(j.alerts.length === 0 ? 'open alerts: none' : `open alerts: ${j.alerts.length}`);
  for (const a of j.alerts) out.push(`  ${a.kind} since ${a.firedAt}: ${printable(a.summary)}`);
  if (j.dead > 0) out.push(`dead: ${j.dead} event(s); see \`receiver events list --status dead\`, then \`receiver replay --dead\``);
  if (j.lanes.length > 0) out.push('lanes (units of work: one route of one event):');
  for (const l of j.lanes) {
    const routes = l.routes.length === 1 && l.routes[0] === l.lane ? '' : l.routes.length === 0 ? ' (not configured any more)' : ` (${l.routes.join(', ')})`;
    const oldest =
      l.oldestPendingAgeSeconds === null ? '' : `, oldest pending received ${l.oldestPendingReceivedAt} (${ageText(l.oldestPendingAgeSeconds)} ago)`;
    out.push(`  ${printable(l.lane)}${printable(routes)}: pending ${l.pending}, running ${l.running}${oldest}`);
  }
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
        : ` (listed ${n.listed}, already stored ${n.alreadyStored}, stored ${n.storedNow}, redelivery asked ${n.redeliveryAsked}, failed ${n.failed}, skipped ${n.skipped})`;
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
  let alerts: AlertRecord[];
  try {
    s = await store.stats(now);
    catchUp = await store.catchUpStates();
    alerts = await store.alerts.firingAlerts();
  } finally {
    await store.close();
  }
  const json = statsJson(s, config, now, catchUp, alerts);
  if (options.json === true) printJson(io.stdout, json);
  else io.stdout.write(describe(json));
}

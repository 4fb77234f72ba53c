import { InvalidArgumentError, type Command } from 'commander';
import { ReceiverError } from '../errors.js';
import type { EventDetail, EventSummary } from '../store/ops-types.js';
import { EVENT_STATUSES, isOneOf, type EventStatus } from '../vocabulary.js';
import { addCommonOptions, configFrom, openStoreFor, positiveInt, printable, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

export const DEFAULT_LIST_LIMIT = 50;

interface ListOptions extends CommonOptions {
  status?: EventStatus;
  source?: string;
  limit?: number;
  json?: boolean;
}

interface ShowOptions extends CommonOptions {
  json?: boolean;
}

function statusFlag(value: string): EventStatus {
  if (!isOneOf(EVENT_STATUSES, value)) throw new InvalidArgumentError(`--status must be one of ${EVENT_STATUSES.join(', ')}, e.g. --status dead.`);
  return value;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The JSON shape of one event in `events list` (and the first fields of `events show`). */
export function summaryJson(e: EventSummary) {
  return {
    id: e.id,
    source: e.source,
    deliveryId: e.deliveryId,
    eventType: e.eventType,
    status: e.status,
    attempts: e.attempts,
    receivedAt: iso(e.receivedAt),
    nextAttemptAt: iso(e.nextAttemptAt),
    finishedAt: iso(e.finishedAt),
    lastError: e.lastError,
    duplicates: e.duplicates,
    forceEffects: e.forceEffects,
  };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The body as text when it is valid UTF-8, else base64; `bodyEncoding` says which. */
export function bodyJson(body: Buffer | null): { body: string | null; bodyEncoding: 'utf8' | 'base64' | null } {
  if (body === null) return { body: null, bodyEncoding: null };
  try {
    return { body: utf8.decode(body), bodyEncoding: 'utf8' };
  } catch {
    return { body: body.toString('base64'), bodyEncoding: 'base64' };
  }
}

export function detailJson(e: EventDetail) {
  return {
    ...summaryJson(e),
    leaseOwner: e.leaseOwner,
    leaseExpiresAt: iso(e.leaseExpiresAt),
    responseStatus: e.responseStatus,
    extraIds: e.extraIds,
    headers: e.headers,
    ...bodyJson(e.body),
    bodySha256: e.bodySha256,
    routeDecisions: e.routeDecisions,
    // `attempts` above is the retry counter (as in `events list`); this is every recorded try.
    attemptLog: e.attemptRows.map((a) => ({
      attempt: a.attempt,
      route: a.route,
      effectKey: a.effectKey,
      runKey: a.runKey,
      outcome: a.outcome,
      forced: a.forced,
      startedAt: iso(a.startedAt),
      finishedAt: iso(a.finishedAt),
      error: a.error,
      output: a.output,
    })),
    effects: e.effects.map((f) => ({
      effectKey: f.effectKey,
      route: f.route,
      businessKey: f.businessKey,
      status: f.status,
      eventId: f.eventId,
      version: f.version,
      runs: f.runs,
      forcedRuns: f.forcedRuns,
      startedAt: iso(f.startedAt),
      finishedAt: iso(f.finishedAt),
      lastError: f.lastError,
    })),
    conflicts: e.conflicts.map((c) => ({ id: c.id, receivedAt: iso(c.receivedAt), bodySha256: c.bodySha256, repeats: c.repeats })),
  };
}

/** Sender-chosen text on one line of a terminal: whitespace runs folded, control characters escaped. */
function oneLine(text: string | null, max: number): string {
  if (text === null) return '';
  const flat = text.replace(/\s+/g, ' ').trim();
  return printable(flat.length > max ? `${flat.slice(0, max - 1)}…` : flat);
}

/** An id or name a sender chose, escaped for a terminal (whole: an id is never cut here). */
const p = (text: string | null) => (text === null ? '' : printable(text));

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

export function registerEvents(program: Command, io: CliIo): void {
  const events = program.command('events').description('inspect stored events');

  addCommonOptions(events.command('list'))
    .description('stored events, newest first')
    .option('--status <status>', `only events with this status (${EVENT_STATUSES.join(', ')})`, statusFlag)
    .option('--source <source>', 'only events from this source')
    .option('--limit <n>', `at most N events (default ${DEFAULT_LIST_LIMIT})`, positiveInt('--limit'))
    .option('--json', 'print one JSON document (an array)')
    .action((options: ListOptions) => listEvents(options, io));

  addCommonOptions(events.command('show').argument('<id>', 'event id'))
    .description('one event with its headers, body, attempts and effects')
    .option('--json', 'print one JSON document')
    .action((idText: string, options: ShowOptions) => showEvent(idText, options, io));
}

/** `receiver events list`: stored events, newest first. */
export async function listEvents(options: ListOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env, { secrets: false });
  const store = await openStoreFor(config);
  let list: EventSummary[];
  try {
    list = await store.listEvents({ status: options.status, source: options.source, limit: options.limit ?? DEFAULT_LIST_LIMIT });
  } finally {
    await store.close();
  }
  if (options.json === true) return printJson(io.stdout, list.map(summaryJson));
  if (list.length === 0) return void io.stdout.write('No events.\n');
  const rows = [['ID', 'RECEIVED', 'SOURCE', 'DELIVERY ID', 'TYPE', 'STATUS', 'ATTEMPTS', 'LAST ERROR']];
  for (const e of list) {
    rows.push([
      String(e.id),
      new Date(e.receivedAt).toISOString(),
      p(e.source),
      p(e.deliveryId),
      p(e.eventType),
      e.status,
      String(e.attempts),
      oneLine(e.lastError, 60),
    ]);
  }
  io.stdout.write(`${table(rows)}\n`);
}

/** `receiver events show <id>`: one event with its headers, body, attempts, effects and conflicts. */
export async function showEvent(idText: string, options: ShowOptions, io: CliIo): Promise<void> {
  if (!/^\d+$/.test(idText) || Number(idText) <= 0) {
    throw new ReceiverError('usage', `"${idText}" is not an event id (a positive whole number)`, { hint: 'find the id with `receiver events list`' });
  }
  const config = configFrom(options, io.env, { secrets: false });
  const store = await openStoreFor(config);
  let event: EventDetail | undefined;
  try {
    event = await store.getEvent(Number(idText));
  } finally {
    await store.close();
  }
  if (event === undefined) {
    throw new ReceiverError('not_found', `event ${idText} does not exist (never received, or purged)`, {
      hint: 'list recent events with `receiver events list`',
    });
  }
  const json = detailJson(event);
  if (options.json === true) return printJson(io.stdout, json);
  io.stdout.write(describeEvent(json));
}

/** Why each route did or did not apply (routeDecisions); they quote sender-chosen values. */
function routesSection(e: ReturnType<typeof detailJson>): string[] {
  // Done without ever being claimed: stored done at ingest because no route applied to it.
  const unrouted = e.status === 'done' && e.attempts === 0;
  const head = unrouted ? '  routes:     no route matched this event when it arrived (stored done; after adding a route, replay it)' : '  routes:';
  if (e.routeDecisions === null) return unrouted ? [head] : [];
  return [head, ...e.routeDecisions.map((d) => `    ${printable(d)}`)];
}

function describeEvent(e: ReturnType<typeof detailJson>): string {
  // Every value a sender chose (ids, type, headers, body, effect keys, errors and output
  // quoting them) goes through printable(): text output is read in a terminal.
  const out: string[] = [
    `event ${e.id}: ${p(e.source)} / ${p(e.deliveryId)} (${p(e.eventType)})`,
    `  status:     ${e.status}${e.status === 'processing' ? ` (lease ${p(e.leaseOwner ?? '?')} until ${e.leaseExpiresAt ?? '?'})` : ''}${e.forceEffects ? ' [replayed with --force]' : ''}`,
    `  received:   ${e.receivedAt}${e.duplicates > 0 ? `, ${e.duplicates} duplicate(s) since` : ''}`,
    `  attempts:   ${e.attempts}${e.status === 'pending' ? `, next at ${e.nextAttemptAt}` : ''}${e.finishedAt === null ? '' : `, finished ${e.finishedAt}`}`,
  ];
  if (e.lastError !== null) out.push(`  last error: ${oneLine(e.lastError, 200)}`);
  out.push(...routesSection(e));
  out.push('headers:');
  if (e.headers === null) out.push('  (dropped by purge --bodies-days)');
  else for (const [k, v] of Object.entries(e.headers)) out.push(`  ${p(k)}: ${p(v)}`);
  out.push(`body (sha256 ${e.bodySha256}):`);
  if (e.body === null) out.push('  (dropped by purge --bodies-days)');
  else if (e.bodyEncoding === 'base64') out.push(`  (not UTF-8; base64) ${e.body}`);
  else out.push(printable(e.body, { keepLines: true }));
  out.push('attempts:');
  if (e.attemptLog.length === 0) out.push('  (none yet)');
  for (const a of e.attemptLog) {
    out.push(
      // The run key only where it is not the effect key itself (a forced run's own key).
      `  #${a.attempt} ${a.startedAt} ${p(a.route)} ${p(a.effectKey)} ${a.outcome}${a.forced ? ' (forced)' : ''}${a.runKey === null || a.runKey === a.effectKey ? '' : ` [run key ${p(a.runKey)}]`}${a.error === null ? '' : `: ${oneLine(a.error, 120)}`}`,
    );
    // What the effect printed (its tail), for a success as much as for a failure.
    if (a.output !== null && a.output.trim() !== '') {
      out.push('    output:');
      for (const line of a.output.replace(/\n$/, '').split('\n')) out.push(`      ${printable(line, { keepLines: true })}`);
    }
  }
  out.push('effects:');
  if (e.effects.length === 0) out.push('  (none)');
  for (const f of e.effects)
    out.push(
      `  ${p(f.effectKey)}: ${f.status}, ${f.runs} run(s)${f.forcedRuns > 0 ? `, ${f.forcedRuns} forced` : ''}${f.eventId === e.id ? '' : ` (last run by event ${f.eventId})`}`,
    );
  if (e.conflicts.length > 0) {
    out.push('conflicts (same delivery id, different body):');
    for (const c of e.conflicts) out.push(`  ${c.receivedAt} sha256 ${c.bodySha256}${c.repeats > 0 ? `, ${c.repeats} repeat(s) since` : ''}`);
  }
  return `${out.join('\n')}\n`;
}

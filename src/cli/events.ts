import { InvalidArgumentError, type Command } from 'commander';
import { deliveryIdForms, NEAR_MATCHES, nearMatchText } from '../delivery-ids.js';
import { ReceiverError } from '../errors.js';
import { attemptsText, prettyBody, replayMark } from '../event-text.js';
import { detailJson, eventJson, summaryJson } from '../json/events.js';
import type { EventDetail, EventSummary } from '../store/ops-types.js';
import type { Store } from '../store/types.js';
import { parseTime } from '../time.js';
import { EVENT_ORIGINS, EVENT_STATUSES, isOneOf, type EventOrigin, type EventStatus } from '../vocabulary.js';
import { addCommonOptions, configFrom, openStoreFor, positiveInt, printable, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

export const DEFAULT_LIST_LIMIT = 50;
/** How many events `--search` reads bodies of at most, by default. */
export const DEFAULT_SCAN_LIMIT = 10_000;
/** The text table's width without --wide. */
export const LIST_WIDTH = 100;

interface ListOptions extends CommonOptions {
  status?: EventStatus;
  source?: string;
  delivery?: string;
  origin?: EventOrigin;
  type?: string;
  since?: number;
  until?: number;
  search?: string;
  scanLimit?: number;
  limit?: number;
  wide?: boolean;
  json?: boolean;
}

interface ShowOptions extends CommonOptions {
  json?: boolean;
}

function statusFlag(value: string): EventStatus {
  if (!isOneOf(EVENT_STATUSES, value)) throw new InvalidArgumentError(`--status must be one of ${EVENT_STATUSES.join(', ')}, e.g. --status dead.`);
  return value;
}

function originFlag(value: string): EventOrigin {
  if (!isOneOf(EVENT_ORIGINS, value)) throw new InvalidArgumentError(`--origin must be one of ${EVENT_ORIGINS.join(', ')}, e.g. --origin test.`);
  return value;
}

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * A time flag: ISO 8601 (a date, or a date and time; without a zone, UTC), or an age before
 * now (`30m`, `2h`, `3d`, `1w`). `now` is read when the flag is parsed.
 */
export function timeFlag(flag: string, now: () => number) {
  return (value: string): number => {
    const age = /^(\d{1,9})([smhdw])$/.exec(value.trim());
    if (age !== null) return now() - Number(age[1]) * UNITS[age[2]!]!;
    try {
      return parseTime(flag, value);
    } catch {
      throw new InvalidArgumentError(`${flag} must be a time: ISO 8601 (2026-11-30, 2026-11-30T14:02 in UTC, or with a zone) or an age (30m, 2h, 3d, 1w).`);
    }
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
  return rows
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** Text cut to `width` characters, the cut shown by `…`. */
const cut = (text: string, width: number) => (text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`);

/**
 * Narrows the columns named in each stage, widest first, down to their minimum in that
 * stage (never below their title), until the table fits `width`; then cuts every cell to
 * its column.
 */
function fitTable(rows: string[][], stages: readonly (readonly [column: number, min: number])[][], width: number): string[][] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  let total = widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1);
  for (const stage of stages) {
    while (total > width) {
      // A title is never cut.
      const room = stage.map(([col, min]) => [col, widths[col]! - Math.max(min, rows[0]![col]!.length)] as const).filter(([, r]) => r > 0);
      if (room.length === 0) break;
      const [col] = room.reduce((a, b) => (widths[b[0]]! > widths[a[0]]! ? b : a));
      widths[col]! -= 1;
      total -= 1;
    }
  }
  return rows.map((r) => r.map((c, i) => cut(c, widths[i]!)));
}

/** `in 4m` from now to a later time; `due` when it has come. */
function inRelative(ms: number, now: number): string {
  const s = Math.ceil((ms - now) / 1000);
  if (s <= 0) return 'due';
  if (s < 60) return `in ${s}s`;
  if (s < 3600) return `in ${Math.ceil(s / 60)}m`;
  if (s < 48 * 3600) return `in ${Math.round(s / 3600)}h`;
  return `in ${Math.round(s / 86_400)}d`;
}

/** `11-30 12:04:05` (UTC): the year and zone a terminal table can do without. */
const shortTime = (ms: number) => new Date(ms).toISOString().slice(5, 19).replace('T', ' ');

/** The table's columns that give way, by position; the last error is wrapped instead (withErrorsWrapped). */
const [SOURCE, DELIVERY, TYPE, LAST_ERROR] = [2, 3, 4, 9] as const;

/** Ids and types give way, down to a few characters each. */
const LIST_STAGES = [
  [
    [DELIVERY, 12],
    [TYPE, 14],
    [SOURCE, 8],
  ],
  [
    [DELIVERY, 10],
    [TYPE, 10],
    [SOURCE, 6],
  ],
  [
    [DELIVERY, 6],
    [TYPE, 6],
  ],
] as const satisfies readonly (readonly [number, number])[][];

export function registerEvents(program: Command, io: CliIo): void {
  const events = program.command('events').description('inspect stored events');

  addCommonOptions(events.command('list'))
    .description('stored events, newest first')
    .option('--status <status>', `only events with this status (${EVENT_STATUSES.join(', ')})`, statusFlag)
    .option('--source <source>', 'only events from this source')
    .option('--delivery <id>', "the event with this delivery id, as the sender shows it (GitHub's GUID alone too); with --source, in that source")
    .option('--origin <origin>', `only events that came in this way (${EVENT_ORIGINS.join(', ')})`, originFlag)
    .option('--type <type>', 'only events of this type: exact, or a pattern when it has * (any characters) or ? (one), e.g. "invoice.*"')
    .option('--since <time>', 'received at or after: ISO 8601 (UTC without a zone) or an age (30m, 2h, 3d, 1w)', timeFlag('--since', io.now))
    .option('--until <time>', 'received before: ISO 8601 (UTC without a zone) or an age (30m, 2h, 3d, 1w)', timeFlag('--until', io.now))
    .option('--search <text>', 'only events whose body contains this text (exact bytes, case-sensitive)')
    .option(
      '--scan-limit <n>',
      `--search reads the bodies of at most the N newest events matching the other filters (default ${DEFAULT_SCAN_LIMIT})`,
      positiveInt('--scan-limit'),
    )
    .option('--limit <n>', `at most N events (default ${DEFAULT_LIST_LIMIT})`, positiveInt('--limit'))
    .option('--wide', `every column whole, times in full (the table is cut to ${LIST_WIDTH} columns otherwise)`)
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
  if (options.search === '') throw new ReceiverError('usage', '--search needs a text to look for', { hint: 'e.g. --search cus_123' });
  if (options.scanLimit !== undefined && options.search === undefined) {
    throw new ReceiverError('usage', '--scan-limit bounds --search, which is not given', { hint: 'add --search TEXT, or leave out --scan-limit' });
  }
  const pattern = options.type !== undefined && /[*?]/.test(options.type);
  const query = {
    status: options.status,
    source: options.source,
    origin: options.origin,
    ...(options.delivery === undefined ? {} : { deliveryIdForms: deliveryIdForms(config.sources, options.delivery, options.source) }),
    ...(pattern ? { eventTypeGlob: options.type } : { eventType: options.type }),
    receivedFrom: options.since,
    receivedBefore: options.until,
    limit: options.limit ?? DEFAULT_LIST_LIMIT,
  };
  const scanLimit = options.scanLimit ?? DEFAULT_SCAN_LIMIT;
  const store = await openStoreFor(config);
  let list: EventSummary[];
  let scanLimitReached = false;
  let near: string | undefined;
  try {
    if (options.search === undefined) list = await store.listEvents(query);
    else ({ events: list, scanLimitReached } = await store.searchEvents({ ...query, bodyContains: options.search, scanLimit }));
    if (list.length === 0 && options.delivery !== undefined) near = await nearMatches(store, options.delivery);
  } finally {
    await store.close();
  }
  if (near !== undefined)
    io.stderr.write(`Note: no event with delivery id "${p(options.delivery!)}"${options.source === undefined ? '' : ` in ${p(options.source)}`}; ${near}\n`);
  if (list.length === 0 && options.source !== undefined && !config.sources.has(options.source)) {
    // A misspelt source lists nothing, as a quiet source does: say which it is.
    const configured = [...config.sources.keys()].map(p).join(', ') || '(none)';
    io.stderr.write(`Warning: no source named "${p(options.source)}" in the configuration; configured: ${configured}\n`);
  }
  if (scanLimitReached) {
    io.stderr.write(
      `Note: --search read the bodies of the ${scanLimit} newest events matching the other filters only; older ones were not searched (narrow with --since, --source or --type, or raise --scan-limit)\n`,
    );
  }
  if (options.json === true) return printJson(io.stdout, list.map(summaryJson));
  if (list.length === 0) return void io.stdout.write('No events.\n');
  const wide = options.wide === true;
  const now = io.now();
  const rows = [['ID', 'RECEIVED', 'SOURCE', 'DELIVERY ID', 'TYPE', 'STATUS', 'ORIGIN', 'ATTEMPTS', 'NEXT', 'LAST ERROR']];
  for (const e of list) {
    rows.push([
      String(e.id),
      wide ? new Date(e.receivedAt).toISOString() : shortTime(e.receivedAt),
      p(e.source),
      p(e.deliveryId),
      p(e.eventType),
      e.status,
      e.origin,
      String(e.attempts),
      e.status === 'pending' ? inRelative(e.nextAttemptAt, now) : '',
      oneLine(e.lastError, Number.MAX_SAFE_INTEGER),
    ]);
  }
  if (wide) return void io.stdout.write(`${table(rows)}\n`);
  io.stdout.write(`${withErrorsWrapped(rows, (cells) => table(fitTable(cells, LIST_STAGES, LIST_WIDTH)), LIST_WIDTH).join('\n')}\n`);
}

/** "near matches: ..." (in any source: the source may be the mistake) or "none near it", for a delivery id nothing was found for. */
export async function nearMatches(store: Pick<Store, 'nearDeliveryIds'>, given: string): Promise<string> {
  const near = await store.nearDeliveryIds(given, NEAR_MATCHES);
  if (near.length === 0) return `no stored delivery id near it among the ${NEAR_MATCHES.scanLimit} newest events`;
  return `near matches: ${near.map((m) => p(nearMatchText(m))).join(', ')}`;
}

/** Where a wrapped last error starts on its own lines. */
const ERROR_INDENT = 4;
/** Lines a last error takes at most in the list; `events show` has it whole. */
const ERROR_LINES = 8;

/**
 * The table, each last error whole: on its row when it fits there, else on the lines
 * below, indented, wrapped between words (a path or URL is never cut: a word longer than a
 * line has a line of its own). Past ERROR_LINES lines it ends at a word with `…`.
 */
function withErrorsWrapped(rows: string[][], render: (rows: string[][]) => string, width: number): string[] {
  const errors = rows.map((r) => r[LAST_ERROR]!);
  const lines = render(rows.map((r, i) => (i === 0 ? r : [...r.slice(0, LAST_ERROR), '']))).split('\n');
  const column = lines[0]!.indexOf('LAST ERROR');
  const out: string[] = [];
  for (const [i, line] of lines.entries()) {
    const error = errors[i]!;
    if (i === 0 || error === '') out.push(line);
    else if (column + error.length <= width) out.push(`${line.padEnd(column)}${error}`);
    else out.push(line, ...wrapWords(error, width - ERROR_INDENT, ERROR_LINES).map((l) => `${' '.repeat(ERROR_INDENT)}${l}`));
  }
  return out;
}

/** Text in lines of at most `width` characters, broken between words; a longer word alone on its line. */
function wrapWords(text: string, width: number, maxLines: number): string[] {
  const lines: string[] = [];
  let line = '';
  const words = text.split(' ');
  for (const [i, word] of words.entries()) {
    if (line !== '' && line.length + 1 + word.length > width) {
      if (lines.length === maxLines - 1) return [...lines, `${line} …`];
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
    if (i === words.length - 1) lines.push(line);
  }
  return lines;
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
  const json = eventJson(event, config);
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

/** Each route's unit of work: its lane, status, retry counter, next attempt (or lease) and last error. */
function unitsSection(e: ReturnType<typeof detailJson>): string[] {
  if (e.units.length === 0) return [];
  const rows = [['ROUTE', 'LANE', 'STATUS', 'ATTEMPTS', 'NEXT', 'LAST ERROR']];
  for (const u of e.units) {
    const next =
      u.status === 'pending' ? (u.nextAttemptAt ?? '') : u.status === 'processing' ? `lease ${p(u.leaseOwner)} until ${u.leaseExpiresAt ?? '?'}` : '';
    rows.push([p(u.route), p(u.lane), u.status, `${u.attempts}${u.replays > 0 ? ` (${u.replays} replay(s))` : ''}`, next, oneLine(u.lastError, 120)]);
  }
  return [
    'units (one per route; the status above is derived from them):',
    ...table(rows)
      .split('\n')
      .map((l) => `  ${l}`),
  ];
}

/** What a conflict's body shows at most; --json has all of it. */
const CONFLICT_BODY_LINES = 40;
const CONFLICT_BODY_CHARS = 4000;

/** The first lines of a text, within both bounds; the last line says what was left out. */
function clip(lines: readonly string[], maxLines: number, maxChars: number): string[] {
  const kept: string[] = [];
  let chars = 0;
  for (const line of lines) {
    if (kept.length === maxLines || chars + line.length > maxChars) {
      const cutLine = kept.length < maxLines && chars < maxChars ? [line.slice(0, maxChars - chars)] : [];
      const left = lines.length - kept.length - cutLine.length;
      return [...kept, ...cutLine, `… ${left > 0 ? `${left} more line(s)` : 'the rest of the line'}; --json has the whole body`];
    }
    kept.push(line);
    chars += line.length + 1;
  }
  return kept;
}

/** A stored body for text output: JSON indented when its content-type says JSON, else as received. */
function bodyLines(b: { headers: Record<string, string> | null; body: string | null; bodyEncoding: 'utf8' | 'base64' | null }): {
  lines: string[];
  indented: boolean;
} {
  if (b.body === null) return { lines: ['(dropped by purge --bodies-days)'], indented: false };
  if (b.bodyEncoding === 'base64') return { lines: [`(not UTF-8; base64) ${b.body}`], indented: false };
  const indented = prettyBody(b);
  return { lines: printable(indented ?? b.body, { keepLines: true }).split('\n'), indented: indented !== undefined };
}

function describeEvent(e: ReturnType<typeof detailJson> & { routesNotConfigured: string[] }): string {
  // Every value a sender chose (ids, type, headers, body, effect keys, errors and output
  // quoting them) goes through printable(): text output is read in a terminal.
  const out: string[] = [
    `event ${e.id}: ${p(e.source)} / ${p(e.deliveryId)} (${p(e.eventType)})`,
    ...(e.senderDeliveryId === e.deliveryId ? [] : [`  sender id:  ${p(e.senderDeliveryId)} (as the sender shows it)`]),
    `  origin:     ${e.origin}`,
    `  status:     ${e.status}${e.status === 'processing' ? ` (lease ${p(e.leaseOwner ?? '?')} until ${e.leaseExpiresAt ?? '?'})` : ''}${e.forceEffects ? ' [replayed with --force]' : ''}`,
    `  received:   ${e.receivedAt}${e.duplicates > 0 ? `, ${e.duplicates} duplicate(s) since` : ''}`,
    `  attempts:   ${attemptsText(e.attempts, e.attemptLog)}${e.status === 'pending' ? `, next at ${e.nextAttemptAt}` : ''}${e.finishedAt === null ? '' : `, finished ${e.finishedAt}`}`,
  ];
  if (e.lastError !== null) out.push(`  last error: ${oneLine(e.lastError, 200)}`);
  out.push(...routesSection(e));
  out.push(...unitsSection(e));
  for (const r of e.routesNotConfigured)
    out.push(`  route ${p(r)}: no longer configured (its work here stays as it is; a replay runs the routes configured now)`);
  out.push('headers:');
  if (e.headers === null) out.push('  (dropped by purge --bodies-days)');
  else for (const [k, v] of Object.entries(e.headers)) out.push(`  ${p(k)}: ${p(v)}`);
  const body = bodyLines(e);
  out.push(`body (sha256 ${e.bodySha256}${body.indented ? '; JSON shown indented, --json has it as received' : ''}):`);
  out.push(...(e.body === null || e.bodyEncoding === 'base64' ? body.lines.map((l) => `  ${l}`) : body.lines));
  out.push('attempts:');
  if (e.attemptLog.length === 0) out.push('  (none yet)');
  for (const [i, a] of e.attemptLog.entries()) {
    // The stored attempt number is the retry counter, which a replay resets: #n counts on.
    const mark = replayMark(e.attemptLog, i);
    if (mark !== undefined) out.push(`  -- ${mark} --`);
    out.push(
      // The run key only where it is not the effect key itself (a forced run's own key).
      `  #${a.number} ${a.startedAt} ${p(a.route)} ${p(a.effectKey)} ${a.outcome}${a.forced ? ' (forced)' : ''}${a.runKey === null || a.runKey === a.effectKey ? '' : ` [run key ${p(a.runKey)}]`}${a.error === null ? '' : `: ${oneLine(a.error, 120)}`}`,
    );
    // What the effect printed (its tail), for a success as much as for a failure.
    if (a.output !== null && a.output.trim() !== '') {
      out.push('    output:');
      for (const line of a.output.replace(/\n$/, '').split('\n')) out.push(`      ${printable(line, { keepLines: true })}`);
    }
  }
  out.push('effects:');
  if (e.effects.length === 0) out.push('  (none)');
  for (const f of e.effects) {
    // Counted from this event's attempts: the ledger's `runs` counts every event's, ok or not.
    const forced = e.attemptLog.filter((a) => a.effectKey === f.effectKey && a.forced && ['ok', 'failed', 'running'].includes(a.outcome)).length;
    const runs = [
      `${f.okRuns} ok`,
      `${f.failedRuns} failed`,
      ...(f.runningRuns > 0 ? [`${f.runningRuns} running`] : []),
      ...(forced > 0 ? [`${forced} forced`] : []),
    ];
    const counted = f.okRuns + f.failedRuns + f.runningRuns === 0 ? 'not run by this event' : runs.join(', ');
    out.push(`  ${p(f.effectKey)}: ${f.status}: ${counted}${f.eventId === e.id ? '' : ` (last run by event ${f.eventId})`}`);
  }
  if (e.conflicts.length > 0) {
    out.push('conflicts (same delivery id, different body):');
    for (const c of e.conflicts) {
      out.push(`  ${c.receivedAt} sha256 ${c.bodySha256}${c.repeats > 0 ? `, ${c.repeats} repeat(s) since` : ''}:`);
      for (const line of clip(bodyLines(c).lines, CONFLICT_BODY_LINES, CONFLICT_BODY_CHARS)) out.push(`    ${line}`);
    }
  }
  return `${out.join('\n')}\n`;
}

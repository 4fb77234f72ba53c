import type { Command } from 'commander';
import type { Config } from '../config/load.js';
import { runCatchUp, runSummary, type CatchUpProgress, type CatchUpResult } from '../catchup/run.js';
import { ReceiverError } from '../errors.js';
import { addCommonOptions, configFrom, openStoreFor, printable, printJson, type CommonOptions } from './common.js';
import { ExitCode, type CliIo } from './io.js';

interface CatchUpOptions extends CommonOptions {
  since?: string;
  dryRun?: boolean;
  json?: boolean;
}

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--since 24h` (s, m, h, d) or an ISO 8601 time: the start, in ms. */
function parseSince(text: string, now: number): number {
  const m = /^(\d+)([smhd])$/.exec(text.trim());
  if (m !== null) return now - Number(m[1]) * UNITS[m[2]!]!;
  const at = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(at))
    throw new ReceiverError('usage', `--since must be a duration (30m, 24h, 7d) or a time (2026-05-01T00:00:00Z), not "${printable(text)}"`);
  return at;
}

export function registerCatchUp(program: Command, io: CliIo): void {
  addCommonOptions(program.command('catch-up'))
    .description('recover deliveries a sender gave up on, through the sender\'s API (sources with "catchUp")')
    .argument('[source...]', 'sources to catch up (default: every source with "catchUp")')
    .option('--since <when>', 'start here (24h, 7d, or a time) instead of where the last run stopped; may reach before catch-up was configured')
    .option('--dry-run', 'list and count what would be recovered; change nothing, here or at the sender')
    .option('--json', 'print one JSON document')
    .action((names: string[], options: CatchUpOptions) => catchUp(names, options, io));
}

/**
 * `receiver catch-up`: one run per chosen source, in turn; the counts on stdout, a progress
 * line on stderr when it is a terminal. A run that ended in an error has said so in its
 * output; the command then exits 1.
 */
export async function catchUp(names: string[], options: CatchUpOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env);
  const chosen = chooseSources(config, names);
  const now = io.now();
  const since = options.since === undefined ? undefined : parseSince(options.since, now);
  const store = await openStoreFor(config);
  const progress = io.stderr.isTTY === true && options.json !== true ? progressLine(io.stderr) : undefined;
  const results: CatchUpResult[] = [];
  try {
    for (const name of chosen) {
      results.push(
        await runCatchUp({
          settings: config.catchUp.get(name)!,
          source: config.sources.get(name)!,
          store,
          routes: config.routes,
          now,
          since,
          dryRun: options.dryRun === true,
          ...(progress === undefined ? {} : { onProgress: progress }),
        }),
      );
      if (progress !== undefined) io.stderr.write('\r\x1b[K');
    }
  } finally {
    await store.close();
  }
  if (options.json === true) printJson(io.stdout, { dryRun: options.dryRun === true, sources: results.map(jsonOf) });
  else io.stdout.write(describe(results, options.dryRun === true));
  if (results.some((r) => r.error !== null)) throw new ExitCode(1);
}

function chooseSources(config: Config, names: string[]): string[] {
  if (config.catchUp.size === 0)
    throw new ReceiverError('config', `${config.file}: no source has "catchUp" configured`, {
      hint: 'add "catchUp" to a stripe, github, paddle or gitlab source (docs/operations.md: "Catch up after downtime")',
    });
  if (names.length === 0) return [...config.catchUp.keys()];
  for (const n of names) {
    if (!config.sources.has(n))
      throw new ReceiverError('usage', `no source named "${printable(n)}"`, { hint: `choose from ${[...config.catchUp.keys()].join(', ')}` });
    if (!config.catchUp.has(n))
      throw new ReceiverError('usage', `source "${n}" has no "catchUp" configured`, {
        hint: `add "catchUp" to sources.${n}, or choose from ${[...config.catchUp.keys()].join(', ')}`,
      });
  }
  return [...new Set(names)];
}

function progressLine(stderr: CliIo['stderr']) {
  return (p: CatchUpProgress): void => {
    const what =
      p.phase === 'listing'
        ? 'listing'
        : `${p.listed} listed, ${p.alreadyStored} already stored, ${p.storedNow} stored, ${p.redeliveryAsked} asked, ${p.failed} failed, ${p.skipped} skipped`;
    stderr.write(`\r\x1b[K${p.source}: ${what}`);
  };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

function jsonOf(r: CatchUpResult) {
  return {
    ...runSummary(r),
    ...(r.busy ? { busy: true } : {}),
    resumeAt: iso(r.resumeAt),
    error: r.error,
    ...(r.hint === null ? {} : { hint: r.hint }),
  };
}

function describe(results: CatchUpResult[], dryRun: boolean): string {
  const out: string[] = [];
  for (const r of results) {
    if (r.busy) {
      out.push(`${r.source} (${r.provider}): another receiver is running its catch-up; nothing done here`);
      continue;
    }
    const recovered =
      r.mode === 'store'
        ? `${dryRun ? 'would store' : 'stored now'} ${r.storedNow}`
        : `${dryRun ? 'would ask redelivery of' : 'redelivery asked'} ${r.redeliveryAsked}`;
    out.push(
      `${r.source} (${r.provider}, from ${iso(r.from)}): listed ${r.listed}, already stored ${r.alreadyStored}, ${recovered}, failed ${r.failed}${r.skipped > 0 ? `, skipped ${r.skipped} (null or malformed)` : ''}`,
    );
    if (r.error !== null) {
      out.push(`  error: ${printable(r.error)}`);
      if (r.hint !== null) out.push(`  try: ${r.hint}`);
    }
  }
  if (dryRun) out.push('dry run: nothing was changed, here or at the senders');
  else if (results.some((r) => r.storedNow > 0)) out.push('stored events are drained by `receiver serve` (a running one picks them up within drain.pollMs)');
  return `${out.join('\n')}\n`;
}

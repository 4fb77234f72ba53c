import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { ReceiverError } from '../errors.js';
import { registerAlerts } from './alerts.js';
import { registerBackup } from './backup.js';
import { registerCatchUp } from './catch-up.js';
import { registerCheckConfig } from './check-config.js';
import { registerContrib } from './contrib.js';
import { registerEvents } from './events.js';
import { registerPurge } from './purge.js';
import { registerReload } from './reload.js';
import { registerReplay } from './replay.js';
import { registerSendTest } from './send-test.js';
import { registerServe } from './serve.js';
import { registerStats } from './stats.js';
import { ExitCode, processIo, type CliIo } from './io.js';

/** Exit codes (docs/contract.md): 0 ok, 1 runtime failure, 2 usage or config error. */
function exitCodeFor(e: unknown): number {
  if (e instanceof ExitCode) return e.code;
  if (e instanceof ReceiverError) return e.kind === 'config' || e.kind === 'usage' ? 2 : 1;
  if (e instanceof CommanderError) return e.exitCode === 0 ? 0 : 2;
  return 1;
}

/** What `--version` prints; the single executable stamps its own at build time. */
export interface BuildStamp {
  version: string;
  /** The git commit it was built from, `-dirty` when the tree had changes. */
  commit?: string;
}

let stamp: BuildStamp | undefined;

export function useBuildStamp(s: BuildStamp): void {
  stamp = s;
}

/** A checkout's version: package.json beside src/ or dist/, the commit when it is a git clone. */
function checkoutStamp(): BuildStamp {
  const root = fileURLToPath(new URL('../../', import.meta.url));
  const { version } = JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { version: string };
  // Only the package's own .git: an npm install inside some other repository is not that commit.
  if (!existsSync(`${root}.git`)) return { version };
  try {
    const commit = execFileSync('git', ['describe', '--always', '--dirty', '--abbrev=12', '--exclude=*'], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 5000,
    })
      .toString()
      .trim();
    return commit === '' ? { version } : { version, commit };
  } catch {
    return { version }; // no git on this host: the version alone
  }
}

function versionText(): string {
  const s = stamp ?? checkoutStamp();
  return s.commit === undefined ? s.version : `${s.version} (commit ${s.commit})`;
}

function buildProgram(io: CliIo = processIo()): Command {
  const program = new Command('receiver')
    .description('Self-hosted webhook receiver: verified, deduplicated, durable webhooks, applied exactly once in effect')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  // Set before the subcommands are added: they copy it.
  program.configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) });
  // Commander's own .version() wants the text up front; this finds it (git) only when asked.
  program.option('-V, --version', 'print the version (and the commit it was built from) and exit');
  program.on('option:version', () => {
    const text = versionText();
    io.stdout.write(`${text}\n`);
    throw new CommanderError(0, 'commander.version', text);
  });
  registerServe(program, io);
  registerCheckConfig(program, io);
  registerReload(program, io);
  registerSendTest(program, io);
  registerPurge(program, io);
  registerReplay(program, io);
  registerEvents(program, io);
  registerStats(program, io);
  registerCatchUp(program, io);
  registerBackup(program, io);
  registerContrib(program, io);
  registerAlerts(program, io);
  // Every subcommand reports bad flags through the same exit path.
  for (const cmd of program.commands) cmd.exitOverride();
  return program;
}

/**
 * Runs one command line (`argv` as process.argv: node, script, arguments) and resolves to
 * its exit code, with errors reported as Error/Try on `io.stderr`. Never exits the process.
 */
export async function run(argv: string[], io: CliIo = processIo()): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (e) {
    // Commander has already printed its message (or help); an ExitCode has said its piece.
    if (!(e instanceof CommanderError) && !(e instanceof ExitCode)) report(e, io);
    return exitCodeFor(e);
  }
}

/** The CLI entry (bin/receiver.js): the process's own streams, clock and environment. */
export async function main(argv: string[]): Promise<void> {
  process.exitCode = await run(argv, processIo());
}

function report(e: unknown, io: CliIo): void {
  if (e instanceof ReceiverError) {
    io.stderr.write(`Error: ${e.message}\n`);
    if (e.hint !== undefined) io.stderr.write(`Try: ${e.hint}\n`);
    return;
  }
  if (e instanceof InvalidArgumentError) {
    io.stderr.write(`Error: ${e.message}\n`);
    return;
  }
  // Not an error we expected: still one line and a hint, not a stack (RECEIVER_DEBUG=1 adds it).
  const message = e instanceof Error ? e.message : String(e);
  io.stderr.write(`Error: ${message}\n`);
  io.stderr.write('Try: this is unexpected; run again with RECEIVER_DEBUG=1 to print where it happened, and report it\n');
  if (io.env.RECEIVER_DEBUG === '1' && e instanceof Error && e.stack !== undefined) io.stderr.write(`${e.stack}\n`);
}

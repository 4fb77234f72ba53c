import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { ReceiverError } from '../errors.js';
import { registerCheckConfig } from './check-config.js';
import { registerEvents } from './events.js';
import { registerPurge } from './purge.js';
import { registerReplay } from './replay.js';
import { registerSendTest } from './send-test.js';
import { registerServe } from './serve.js';
import { registerStats } from './stats.js';

/** Exit codes (docs/contract.md): 0 ok, 1 runtime failure, 2 usage or config error. */
export function exitCodeFor(e: unknown): number {
  if (e instanceof ReceiverError) return e.kind === 'config' || e.kind === 'usage' ? 2 : 1;
  if (e instanceof CommanderError) return e.exitCode === 0 ? 0 : 2;
  return 1;
}

export function buildProgram(): Command {
  const program = new Command('receiver')
    .description('Self-hosted webhook receiver: verified, deduplicated, durable webhooks, applied exactly once in effect')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  program.configureOutput({ writeErr: (s) => process.stderr.write(s) });
  registerServe(program);
  registerCheckConfig(program);
  registerSendTest(program);
  registerPurge(program);
  registerReplay(program);
  registerEvents(program);
  registerStats(program);
  // Every subcommand reports bad flags through the same exit path.
  for (const cmd of program.commands) cmd.exitOverride();
  return program;
}

export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      // Commander has already printed its message (or help).
      process.exitCode = exitCodeFor(e);
      return;
    }
    report(e);
    process.exitCode = exitCodeFor(e);
  }
}

function report(e: unknown): void {
  if (e instanceof ReceiverError) {
    process.stderr.write(`Error: ${e.message}\n`);
    if (e.hint !== undefined) process.stderr.write(`Try: ${e.hint}\n`);
    return;
  }
  if (e instanceof InvalidArgumentError) {
    process.stderr.write(`Error: ${e.message}\n`);
    return;
  }
  // Not an error we expected: still one line and a hint, not a stack (RECEIVER_DEBUG=1 adds it).
  const message = e instanceof Error ? e.message : String(e);
  process.stderr.write(`Error: ${message}\n`);
  process.stderr.write('Try: this is unexpected; run again with RECEIVER_DEBUG=1 to print where it happened, and report it\n');
  if (process.env.RECEIVER_DEBUG === '1' && e instanceof Error && e.stack !== undefined) process.stderr.write(`${e.stack}\n`);
}

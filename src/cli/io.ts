/**
 * What a subcommand reads and writes besides its options: its output streams, its clock and
 * its environment. The CLI entry passes the process's own; tests pass buffers, a fixed
 * clock and an environment of their own, and run the command in-process.
 */
export interface CliIo {
  stdout: { write(text: string): unknown };
  /**
   * `isTTY`: a terminal, where a command may draw a progress line (catch-up) and serve
   * writes readable log lines; `hasColors()`: whether that terminal shows colours; `fd`:
   * its descriptor, for a thread that draws progress while this one is busy (backup).
   */
  stderr: { write(text: string): unknown; isTTY?: boolean; hasColors?: () => boolean; fd?: number };
  now: () => number;
  /** Standard input, for a command that reads it (`send-test --body -`); absent in tests that give none. */
  stdin?: AsyncIterable<Buffer | string>;
  /** Where `env:` secrets and the RECEIVER_* settings are read. */
  env: NodeJS.ProcessEnv;
}

export function processIo(): CliIo {
  return { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, now: Date.now, env: process.env };
}

/**
 * A command that has said what it had to say on stdout and only needs to end with this
 * exit code (send-test on a non-2xx answer). Not an error: nothing more is printed.
 */
export class ExitCode {
  constructor(readonly code: number) {}
}

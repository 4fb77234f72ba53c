import { InvalidArgumentError, type Command } from 'commander';
import { loadConfig, type Config, type ConfigOverrides } from '../config/load.js';
import { isPostgresUrl } from '../config/database.js';
import { openStore } from '../store/open.js';
import { existsSync } from 'node:fs';
import { ReceiverError } from '../errors.js';
import type { Store } from '../store/types.js';
import type { CliIo } from './io.js';

/** Options every subcommand takes (-c/--config, --db). */
export interface CommonOptions {
  config?: string;
  db?: string;
}

export function addCommonOptions(cmd: Command): Command {
  return cmd
    .option('-c, --config <file>', 'configuration file (default ./receiver.config.json or $RECEIVER_CONFIG)')
    .option('--db <path-or-url>', 'database file or postgres:// URL (overrides "database"; also $RECEIVER_DB)');
}

export function configFrom(
  options: CommonOptions & Omit<ConfigOverrides, 'config' | 'db' | 'withoutSecrets'>,
  env: NodeJS.ProcessEnv,
  load: { secrets?: boolean } = {},
): Config {
  const overrides: ConfigOverrides = load.secrets === false ? { withoutSecrets: true } : {};
  if (options.config !== undefined) overrides.config = options.config;
  if (options.db !== undefined) overrides.db = options.db;
  if (options.host !== undefined) overrides.host = options.host;
  if (options.port !== undefined) overrides.port = options.port;
  if (options.logLevel !== undefined) overrides.logLevel = options.logLevel;
  if (options.logFormat !== undefined) overrides.logFormat = options.logFormat;
  return loadConfig(overrides, env);
}

/** For one-shot commands: SQLite waits for the lock the whole busy timeout (no server to keep responsive). */
export function openStoreFor(config: Config): Promise<Store> {
  // Operator commands never create a database: a relative path typed in the wrong
  // directory would otherwise answer "no events" from a new, empty file.
  if (!isPostgresUrl(config.database) && !existsSync(config.database)) {
    return Promise.reject(
      new ReceiverError('runtime', `no database at ${config.database}`, {
        hint: 'pass --db with the path serve uses (see "database" in the configuration; a relative path is resolved against the current directory)',
      }),
    );
  }
  return openStore(config.database, { busyTimeoutMs: Math.max(config.busyTimeoutMs, 5000) });
}

/** Parses a positive whole number flag; usage error naming the flag otherwise. */
export function positiveInt(flag: string) {
  return (value: string): number => {
    if (!/^\d+$/.test(value) || Number(value) <= 0) {
      throw new InvalidArgumentError(`${flag} must be a positive whole number, e.g. ${flag} 30.`);
    }
    return Number(value);
  };
}

/**
 * Characters a terminal acts on rather than shows: C0 controls (ESC starts an escape
 * sequence), DEL, C1 controls (U+009B is a one-character CSI) and the bidirectional
 * overrides that reorder what follows them.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** The ones JSON.stringify leaves raw (it escapes C0 itself; its own newlines are layout). */
const CONTROL_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const escapeChar = (ch: string) => {
  const code = ch.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
};

/**
 * Sender-chosen text (delivery ids, event types, headers, bodies, errors, effect keys)
 * for text output: control characters become visible escapes (`\x1b`, `\u202e`), so what a
 * sender put in an id cannot move the cursor, rewrite earlier lines or retitle the
 * terminal of the operator reading it. `keepLines` keeps newlines and tabs (a body).
 */
export function printable(text: string, { keepLines = false }: { keepLines?: boolean } = {}): string {
  return text.replace(CONTROL, (ch) => (keepLines && (ch === '\n' || ch === '\t') ? ch : escapeChar(ch)));
}

/**
 * One JSON document on stdout. JSON.stringify escapes C0 controls but writes C1 and
 * bidirectional controls raw; they are escaped as \uXXXX too (they only occur inside
 * strings), so the document parses to exactly the same values.
 */
export function printJson(out: CliIo['stdout'], value: unknown): void {
  const text = JSON.stringify(value, null, 2).replace(CONTROL_IN_JSON, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
  out.write(`${text}\n`);
}

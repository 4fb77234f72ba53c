import { InvalidArgumentError, type Command } from 'commander';
import { loadConfigAndEnv, type Config, type ConfigOverrides } from '../config/load.js';
import { becomeServiceUser } from '../config/service-user.js';
import { isPostgresUrl } from '../config/database.js';
import { openStore } from '../store/open.js';
import { existsSync } from 'node:fs';
import { ReceiverError } from '../errors.js';
import type { Store } from '../store/types.js';
import type { CliIo } from './io.js';
import { CONTROL_IN_JSON } from '../printable.js';

export { printable } from '../printable.js';

/** Options every subcommand takes (-c/--config, --db, --env-file). */
export interface CommonOptions {
  config?: string;
  db?: string;
  envFile?: string;
}

export function addCommonOptions(cmd: Command): Command {
  return cmd
    .option('-c, --config <file>', 'configuration file (default ./receiver.config.json or $RECEIVER_CONFIG)')
    .option('--db <path-or-url>', 'database file or postgres:// URL (overrides "database"; also $RECEIVER_DB)')
    .option('--env-file <file>', 'NAME=value lines read as environment variables under the real ones (overrides "envFile"; also $RECEIVER_ENV_FILE)');
}

export function configFrom(
  options: CommonOptions & Omit<ConfigOverrides, 'config' | 'db' | 'withoutSecrets'>,
  env: NodeJS.ProcessEnv,
  load: { secrets?: boolean } = {},
): Config {
  return configAndEnvFrom(options, env, load).config;
}

/** The flags as configuration overrides (serve reloads with the same ones). */
export function overridesFrom(
  options: CommonOptions & Omit<ConfigOverrides, 'config' | 'db' | 'withoutSecrets'>,
  load: { secrets?: boolean } = {},
): ConfigOverrides {
  const overrides: ConfigOverrides = load.secrets === false ? { withoutSecrets: true } : {};
  if (options.config !== undefined) overrides.config = options.config;
  if (options.db !== undefined) overrides.db = options.db;
  if (options.host !== undefined) overrides.host = options.host;
  if (options.port !== undefined) overrides.port = options.port;
  if (options.logLevel !== undefined) overrides.logLevel = options.logLevel;
  if (options.logFormat !== undefined) overrides.logFormat = options.logFormat;
  if (options.user !== undefined) overrides.user = options.user;
  if (options.envFile !== undefined) overrides.envFile = options.envFile;
  if (options.pidFile !== undefined) overrides.pidFile = options.pidFile;
  return overrides;
}

/** configFrom, with the environment the configuration was resolved against (the environment file's variables under the real ones). */
export function configAndEnvFrom(
  options: CommonOptions & Omit<ConfigOverrides, 'config' | 'db' | 'withoutSecrets'>,
  env: NodeJS.ProcessEnv,
  load: { secrets?: boolean } = {},
): { config: Config; env: NodeJS.ProcessEnv } {
  const loaded = loadConfigAndEnv(overridesFrom(options, load), env);
  // Configuration and secrets are read; a process started as root now becomes the
  // service's user. Only the process's own environment means a real process: a command a
  // test runs in-process never changes the test runner's user.
  if (env === process.env) becomeServiceUser(loaded.config.user);
  return loaded;
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
 * One JSON document on stdout. JSON.stringify escapes C0 controls but writes C1 and
 * bidirectional controls raw; they are escaped as \uXXXX too (they only occur inside
 * strings), so the document parses to exactly the same values.
 */
export function printJson(out: CliIo['stdout'], value: unknown): void {
  const text = JSON.stringify(value, null, 2).replace(CONTROL_IN_JSON, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
  out.write(`${text}\n`);
}

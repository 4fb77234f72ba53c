import { resolve } from 'node:path';
import { configError } from '../errors.js';
import type { ConfigOverrides } from './load.js';
import { readText, type ReadText } from './secret.js';

/**
 * The environment file: NAME=value lines that receiver reads itself (serve --env-file,
 * $RECEIVER_ENV_FILE, or `envFile` in the configuration), at start and at every reload, so
 * an `env:` secret can be rotated without a restart (a unit's EnvironmentFile= is read
 * only when the service starts). A variable of the real environment wins over the file's.
 */

/** A variable name as the shell and systemd take it. */
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * NAME=value lines as systemd's EnvironmentFile= reads them: blank lines and lines starting
 * with `#` or `;` are skipped, `export ` before the name is allowed, a value in single
 * quotes is taken as is, one in double quotes has `\"`, `\\`, `\n` and `\$` unescaped; an
 * unquoted value loses its surrounding whitespace. A line that is none of these is an error
 * naming `path:line`, without its text (it may hold a secret).
 */
export function parseEnvFile(text: string, path: string): Record<string, string> {
  const vars: Record<string, string> = {};
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  lines.forEach((line, i) => {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#') || trimmed.startsWith(';')) return;
    const eq = trimmed.indexOf('=');
    const name = (eq < 0 ? trimmed : trimmed.slice(0, eq)).replace(/^export\s+/, '').trim();
    if (eq < 0 || !NAME.test(name)) {
      throw configError(
        `${path}:${i + 1}: not a NAME=value line`,
        'write one variable per line as NAME=value (letters, digits and "_" in the name); "#" starts a comment',
      );
    }
    let value = trimmed.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith("'") && value.endsWith("'")) value = value.slice(1, -1);
    else if (value.length >= 2 && value.startsWith('"') && value.endsWith('"'))
      value = value.slice(1, -1).replace(/\\(["\\$n])/g, (_m, c: string) => (c === 'n' ? '\n' : c));
    // Own properties only, as env: references read them.
    Object.defineProperty(vars, name, { value, enumerable: true, writable: true, configurable: true });
  });
  return vars;
}

/**
 * The environment the configuration is resolved against: `env`, over the variables of the
 * environment file when one is named (--env-file, else $RECEIVER_ENV_FILE, else the
 * file's `envFile`). Loaded without secrets (operator commands), a file this user cannot
 * read is passed over: those commands read no secret.
 */
export function withEnvFile(
  json: unknown,
  overrides: ConfigOverrides,
  env: NodeJS.ProcessEnv,
  read: ReadText = readText,
): { path?: string; env: NodeJS.ProcessEnv } {
  const fromJson =
    json !== null && typeof json === 'object' && typeof (json as { envFile?: unknown }).envFile === 'string'
      ? (json as { envFile: string }).envFile
      : undefined;
  const [field, named] =
    overrides.envFile !== undefined
      ? ['--env-file', overrides.envFile]
      : env.RECEIVER_ENV_FILE !== undefined && env.RECEIVER_ENV_FILE !== ''
        ? ['RECEIVER_ENV_FILE', env.RECEIVER_ENV_FILE]
        : ['envFile', fromJson];
  if (named === undefined || named === '') return { env };
  const path = resolve(named);
  let text: string;
  try {
    text = read(path);
  } catch (e) {
    if (overrides.withoutSecrets === true) return { env };
    const code = (e as NodeJS.ErrnoException).code ?? 'error';
    throw configError(
      `${field}: cannot read the environment file ${path} (${code})`,
      code === 'ENOENT'
        ? `create ${path} (NAME=value lines, mode 0600), or correct ${field}`
        : `check the permissions of ${path} (serve reads it as root when started as root)`,
    );
  }
  const merged: NodeJS.ProcessEnv = parseEnvFile(text, path);
  for (const [name, value] of Object.entries(env)) if (value !== undefined) merged[name] = value;
  return { path, env: merged };
}
